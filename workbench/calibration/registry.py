"""Calibrators by name: build one from a recipe's kind (a fixed kind, or ``auto``), or rebuild a fitted one from its
saved dict (:func:`~workbench.calibration.catalog.calibrator_from_dict`; a saved calibrator is always of a fixed
kind)."""

from __future__ import annotations

from typing import Any

from workbench.calibration.base import Calibrator
from workbench.calibration.catalog import KINDS, RAW, calibrator_from_dict, new_calibrator
from workbench.calibration.choice import ChoosingCalibrator
from workbench.core.errors import ConfigError

__all__ = ["AUTO", "KINDS", "RAW", "calibrator_from_dict", "make_calibrator"]

AUTO = "auto"
""":func:`make_calibrator` also builds ``auto``: a calibrator whose ``fit`` chooses one of :data:`KINDS` by out-of-fold
log loss (:class:`~workbench.calibration.choice.ChoosingCalibrator`); what it saves is the chosen kind's dict."""


def make_calibrator(kind: str, **kw: Any) -> Calibrator:
    """A new, unfitted calibrator of ``kind`` (one of :data:`KINDS`, :data:`AUTO` or :data:`RAW`) with options ``kw``.

    Raises :class:`ConfigError` on an unknown kind or an option the kind does not take.
    """
    if kind != AUTO:
        if kind not in (*KINDS, RAW):
            known = ", ".join((*KINDS, AUTO, RAW))
            raise ConfigError(f"unknown calibrator kind {kind!r} (known: {known})", "calibrator")
        return new_calibrator(kind, **kw)

    try:
        return ChoosingCalibrator(**kw)
    except TypeError as exc:
        raise ConfigError(f"bad option(s) {sorted(kw)} for calibrator {kind!r}: {exc}", kind) from None
