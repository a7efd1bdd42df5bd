"""The pass-through "calibrator": a router whose classifier reads the raw (imputed) feature values.

Isotonic calibration merges close scores into one step, which can only lower a feature's ranking quality; at small
calibration sizes the loss is large (the study reference: confidence 0.705 → 0.582 AUROC after calibration). A
classifier that standardises its own inputs (the logistic model, the MLP) can read the raw values instead. Putting
that choice in a calibrator keeps one decision path — :class:`~workbench.calibration.calibrator_set.CalibratorSet`
→ classifier → τ — for the stages, the bundle and the runtime. Its outputs are NOT probabilities.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

import numpy as np

from workbench.calibration.base import FORMAT_VERSION, Calibrator, as_scores, check_fit_inputs, require_keys


class RawCalibrator(Calibrator):
    """``predict(s) = s``: the raw score passed through unchanged (NaN stays NaN). ``fit`` only checks its inputs."""

    def __init__(self) -> None:
        self._fitted = False

    @property
    def kind(self) -> str:
        return "raw"

    @property
    def is_fitted(self) -> bool:
        return self._fitted

    @property
    def strictly_increasing(self) -> bool:
        return True

    def fit(self, scores: Sequence[float], labels: Sequence[float]) -> Self:
        check_fit_inputs(scores, labels)
        self._fitted = True
        return self

    def predict(self, scores: Sequence[float]) -> np.ndarray:
        self._require_fitted()
        return as_scores(scores).astype(float)

    def to_dict(self) -> dict[str, Any]:
        self._require_fitted()
        return {"kind": self.kind, "version": FORMAT_VERSION}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RawCalibrator:
        """Rebuild from :meth:`to_dict` output; :class:`DataError` on a malformed dict."""
        require_keys(d, "raw", ())
        out = cls()
        out._fitted = True
        return out
