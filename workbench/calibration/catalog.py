"""The fixed calibrator kinds by name: build an unfitted one, or rebuild a fitted one from its saved dict.

:mod:`workbench.calibration.registry` adds ``auto`` (a calibrator that chooses among these kinds) on top; the
out-of-fold machinery and the choice itself build their candidates here, below it.
"""

from __future__ import annotations

from typing import Any

from workbench.calibration.base import Calibrator
from workbench.calibration.beta import BetaCalibrator
from workbench.calibration.isotonic import IsotonicCalibrator
from workbench.calibration.platt import PlattCalibrator
from workbench.calibration.raw import RawCalibrator
from workbench.core.errors import ConfigError, DataError

KINDS = ("isotonic", "centered_isotonic", "platt", "beta")
"""The calibrator kinds: each maps a score to a probability of being correct."""

RAW = "raw"
""":func:`new_calibrator` and :func:`calibrator_from_dict` also know ``raw``, which passes the raw value through (not
a probability): for a router whose classifier reads raw features (:mod:`workbench.calibration.raw`)."""


def new_calibrator(kind: str, **kw: Any) -> Calibrator:
    """A new, unfitted calibrator of ``kind`` (one of :data:`KINDS` or :data:`RAW`) with options ``kw``.

    Raises :class:`ConfigError` on an unknown kind or an option the kind does not take.
    """
    if kind not in (*KINDS, RAW):
        raise ConfigError(f"unknown calibrator kind {kind!r} (known: {', '.join(KINDS)}, {RAW})", "calibrator")
    if "centered" in kw:
        raise ConfigError("choose 'isotonic' or 'centered_isotonic' as the kind instead of passing centered", kind)
    try:
        if kind == "platt":
            return PlattCalibrator(**kw)
        if kind == "beta":
            return BetaCalibrator(**kw)
        if kind == "raw":
            return RawCalibrator(**kw)
        return IsotonicCalibrator(centered=kind == "centered_isotonic", **kw)
    except TypeError as exc:
        raise ConfigError(f"bad option(s) {sorted(kw)} for calibrator {kind!r}: {exc}", kind) from None


def calibrator_from_dict(d: Any) -> Calibrator:
    """Rebuild a fitted calibrator from its ``to_dict()`` output (e.g. after ``json.loads``); loads no code.

    Raises :class:`DataError` with a one-line message on anything but a well-formed dict: unknown kind, missing
    or unknown key, unsupported version, NaN or non-numeric values, non-monotone breakpoints.
    """
    if not isinstance(d, dict):
        raise DataError(f"expected a dict, got {type(d).__name__}", "calibrator")
    if "kind" not in d:
        raise DataError("missing key 'kind'", "calibrator")
    kind = d["kind"]
    if kind == "platt":
        return PlattCalibrator.from_dict(d)
    if kind == "beta":
        return BetaCalibrator.from_dict(d)
    if kind == "raw":
        return RawCalibrator.from_dict(d)
    if kind in ("isotonic", "centered_isotonic"):
        return IsotonicCalibrator.from_dict(d)
    raise DataError(f"unknown calibrator kind {kind!r} (known: {', '.join(KINDS)})", "calibrator")
