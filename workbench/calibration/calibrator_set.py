"""Per-feature calibrators with their imputation medians: the first half of D²-RAG's decision path.

A :class:`CalibratorSet` turns a vector of raw oriented features (higher = more certain) into calibrated
probabilities ``u`` (spec §13.16): every non-finite value (NaN, ±inf) is replaced by the fit split's median of that
feature — the rule the ``calibrate`` stage applied to its training data — and each feature goes through its own
fitted calibrator. The ``calibrate`` stage writes one, the evaluation stage and the runtime read it, so both clean and
calibrate with the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from workbench.calibration.base import Calibrator
from workbench.calibration.registry import calibrator_from_dict
from workbench.core.errors import DataError

INF_CLIP = 1e10
"""Where a feature has no stored median, ±inf becomes ±1e10 and NaN 0 (the released code's rule, spec §13.16)."""


@dataclass
class CalibratorSet:
    """``features`` in order, one fitted calibrator each, and the fit split's median of each raw feature."""

    features: tuple[str, ...]
    calibrators: dict[str, Calibrator]
    medians: dict[str, float] = field(default_factory=dict)

    kind: ClassVar[str] = "calibrator_set"
    version: ClassVar[int] = 1

    def __post_init__(self) -> None:
        self.features = tuple(self.features)
        missing = [f for f in self.features if f not in self.calibrators]
        if missing:
            raise DataError(f"no calibrator for feature(s) {missing}", "calibrators")
        self.calibrators = {
            f: calibrator_from_dict(c) if isinstance(c, dict) else c
            for f, c in self.calibrators.items()
            if f in self.features
        }
        self.medians = {str(k): float(v) for k, v in self.medians.items()}

    def clean(self, raw: Mapping[str, float] | Sequence[float]) -> tuple[np.ndarray, list[str]]:
        """``(values in feature order, names of the imputed features)`` for one question's raw features."""
        values = [raw.get(f, math.nan) for f in self.features] if isinstance(raw, Mapping) else list(raw)
        if len(values) != len(self.features):
            raise DataError(f"expected {len(self.features)} features, got {len(values)}", "features")
        out = np.empty(len(self.features), dtype=float)
        imputed: list[str] = []
        for j, (name, value) in enumerate(zip(self.features, values, strict=True)):
            value = math.nan if value is None else float(value)
            if math.isfinite(value):
                out[j] = value
                continue
            imputed.append(name)
            median = self.medians.get(name, math.nan)
            if math.isfinite(median):
                out[j] = median
            else:
                out[j] = 0.0 if math.isnan(value) else math.copysign(INF_CLIP, value)
        return out, imputed

    def transform(self, rows: Any) -> np.ndarray:
        """Calibrated ``u`` for cleaned rows ``[n, features]`` (finite values; see :meth:`clean`)."""
        matrix = np.asarray(rows, dtype=float)
        if matrix.ndim != 2 or matrix.shape[1] != len(self.features):
            raise DataError(f"expected rows of {len(self.features)} features, got shape {matrix.shape}", "features")
        out = np.empty_like(matrix)
        for j, name in enumerate(self.features):
            out[:, j] = self.calibrators[name].predict(matrix[:, j])
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: kind, version, features, medians, and each calibrator's own dict."""
        return {
            "kind": self.kind,
            "version": self.version,
            "features": list(self.features),
            "medians": {f: self.medians[f] for f in self.features if f in self.medians},
            "calibrators": {f: self.calibrators[f].to_dict() for f in self.features},
        }

    @classmethod
    def from_dict(cls, d: Any) -> CalibratorSet:
        """Rebuild from :meth:`to_dict` output; DataError on a malformed dict (each calibrator is checked too)."""
        where = "calibrator set"
        if not isinstance(d, dict) or d.get("kind") != cls.kind:
            raise DataError(f"not a calibrator set (kind != {cls.kind!r})", where)
        if d.get("version") != cls.version:
            raise DataError(f"unsupported version {d.get('version')!r} (this workbench reads {cls.version})", where)
        extra = sorted(set(d) - {"kind", "version", "features", "medians", "calibrators"})
        if extra:
            raise DataError(f"unknown key(s) {extra}", where)
        features, medians, calibrators = d.get("features"), d.get("medians", {}), d.get("calibrators")
        if not isinstance(features, list) or not features or not all(isinstance(f, str) for f in features):
            raise DataError("features must be a non-empty list of names", where)
        if not isinstance(calibrators, dict) or not isinstance(medians, dict):
            raise DataError("calibrators and medians must be mappings", where)
        for name, value in medians.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise DataError(f"median of {name!r} must be a finite number", where)
        missing = [f for f in features if f not in calibrators]
        if missing:
            raise DataError(f"no calibrator for feature(s) {missing}", where)
        return cls(tuple(features), {f: calibrator_from_dict(calibrators[f]) for f in features}, medians)
