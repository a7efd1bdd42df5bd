"""The calibrator contract and the checks shared by every calibrator.

A calibrator maps a score oriented "higher = more certain" to an estimated probability of being correct. It is
fitted with ``fit(scores, labels)``, applied with ``predict(scores)`` (numpy only, no scikit-learn) and saved as a
plain JSON-serialisable dict with ``to_dict()``: a ``"kind"``, a format ``"version"`` and the fitted numbers. No
pickle is ever written or read.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Self

import numpy as np

from workbench.core.errors import DataError

FORMAT_VERSION = 1
"""Version of the dict layout written by ``to_dict``; bump it when the layout changes."""


class Calibrator(ABC):
    """A monotone map from a confidence score to a probability in [0, 1]."""

    @property
    @abstractmethod
    def kind(self) -> str:
        """The name ``calibrator_from_dict`` and ``make_calibrator`` know this calibrator by."""

    @abstractmethod
    def fit(self, scores: Sequence[float], labels: Sequence[float]) -> Self:
        """Fit on finite ``scores`` and labels in [0, 1] (see :func:`check_fit_inputs`); returns ``self``."""

    @abstractmethod
    def predict(self, scores: Sequence[float]) -> np.ndarray:
        """Calibrated probabilities in [0, 1], one per score (NaN stays NaN)."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable parameters with ``"kind"`` and ``"version"`` keys."""

    @property
    @abstractmethod
    def is_fitted(self) -> bool:
        """Whether ``fit`` (or a rebuild from a dict) has set the parameters."""

    @property
    def strictly_increasing(self) -> bool:
        """Whether the fitted map is strictly increasing, so it keeps the order of any two scores (up to float
        rounding at the saturated ends): the calibrated score then ranks exactly as the raw one. False unless a
        kind says otherwise (isotonic maps have flat steps)."""
        return False

    choice: dict[str, Any] | None = None
    """How this calibrator was chosen (:mod:`workbench.calibration.choice`), when it was: saved and loaded with the
    :class:`~workbench.calibration.calibrator_set.CalibratorSet` that holds it, not in :meth:`to_dict`."""

    def resolved(self) -> Calibrator:
        """The calibrator that does the work and is saved: ``self``, or for a choosing calibrator the one it chose."""
        return self

    def _require_fitted(self) -> None:
        if not self.is_fitted:
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit() first")


def check_fit_inputs(scores: Sequence[float], labels: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Validate calibration data: 1-D, equal length, finite scores, labels in [0, 1] with two distinct values.

    Raises :class:`DataError` with a one-line message naming what is wrong (e.g. how many scores are NaN; the
    imputation policy belongs to the caller).
    """
    s = np.asarray(scores, dtype=float).reshape(-1)
    y = np.asarray(labels, dtype=float).reshape(-1)
    if s.shape != y.shape:
        raise DataError(f"{s.size} scores but {y.size} labels: the two must have equal length", "calibration data")
    if s.size == 0:
        raise DataError("no examples to fit a calibrator on", "calibration data")
    n_nan = int(np.isnan(s).sum())
    if n_nan:
        raise DataError(f"{n_nan} of {s.size} scores are NaN; impute or drop them before calibrating", "scores")
    n_inf = int(np.isinf(s).sum())
    if n_inf:
        raise DataError(f"{n_inf} of {s.size} scores are infinite; clip them before calibrating", "scores")
    n_bad = int((np.isnan(y) | (y < 0.0) | (y > 1.0)).sum())
    if n_bad:
        raise DataError(f"{n_bad} of {y.size} labels are NaN or outside [0, 1]", "labels")
    if y.min() == y.max():
        raise DataError("label column has one class only", "labels")
    return s, y


def as_scores(scores: Sequence[float]) -> np.ndarray:
    """Scores to predict on, as a 1-D float array."""
    return np.asarray(scores, dtype=float).reshape(-1)


def require_keys(d: Any, kind: str, keys: Sequence[str]) -> None:
    """Check a serialised calibrator has exactly the expected keys and the supported format version."""
    if not isinstance(d, dict):
        raise DataError(f"expected a dict, got {type(d).__name__}", f"calibrator {kind!r}")
    expected = {"kind", "version", *keys}
    missing = sorted(expected - d.keys())
    if missing:
        raise DataError(f"missing key(s) {', '.join(missing)}", f"calibrator {kind!r}")
    extra = sorted(str(k) for k in d.keys() - expected)
    if extra:
        raise DataError(f"unknown key(s) {', '.join(extra)}", f"calibrator {kind!r}")
    if d["version"] != FORMAT_VERSION or isinstance(d["version"], bool):
        raise DataError(
            f"unsupported format version {d['version']!r} (this workbench reads version {FORMAT_VERSION})",
            f"calibrator {kind!r}",
        )


def finite_number(value: Any, name: str, kind: str) -> float:
    """A finite real number from a serialised calibrator, or :class:`DataError`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise DataError(f"{name} must be a finite number, got {value!r}", f"calibrator {kind!r}")
    return float(value)


def finite_vector(value: Any, name: str, kind: str) -> np.ndarray:
    """A non-empty list of finite real numbers from a serialised calibrator, or :class:`DataError`."""
    if not isinstance(value, list | tuple) or not value:
        raise DataError(f"{name} must be a non-empty list of numbers", f"calibrator {kind!r}")
    return np.array([finite_number(v, f"{name}[{i}]", kind) for i, v in enumerate(value)], dtype=float)
