"""Per-feature calibrators with their imputation values: the first half of D²-RAG's decision path.

A :class:`CalibratorSet` turns a vector of raw oriented features (higher = more certain) into calibrated
probabilities ``u`` (spec §13.16): a missing value (NaN) is replaced by the fit split's median of that feature, and
±inf by the end of the fit split's finite range on its side (the DTR NLL of an empty answer is −inf once oriented:
the least certain value there is, not a typical one) — the rule the ``calibrate`` stage applied to its training
data — and each feature goes through its own fitted calibrator. The ``calibrate`` stage writes one, the evaluation
stage and the runtime read it, so both clean and calibrate with the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from workbench.calibration.base import Calibrator
from workbench.calibration.catalog import calibrator_from_dict
from workbench.calibration.choice import CalibratorChoice
from workbench.core.errors import DataError

INF_CLIP = 1e10
"""Where a feature has no stored median or range, ±inf becomes ±1e10 and NaN 0 (the released code's rule, spec
§13.16). A set without ``ranges`` (written before they existed) imputes ±inf with the median, as it was fitted."""


@dataclass
class CalibratorSet:
    """``features`` in order, one fitted calibrator each, the fit split's median of each raw feature (for NaN) and
    its finite ``(min, max)`` range (for −inf / +inf)."""

    features: tuple[str, ...]
    calibrators: dict[str, Calibrator]
    medians: dict[str, float] = field(default_factory=dict)
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)

    kind: ClassVar[str] = "calibrator_set"
    version: ClassVar[int] = 1

    def __post_init__(self) -> None:
        self.features = tuple(self.features)
        missing = [f for f in self.features if f not in self.calibrators]
        if missing:
            raise DataError(f"no calibrator for feature(s) {missing}", "calibrators")
        self.calibrators = {
            f: calibrator_from_dict(c) if isinstance(c, dict) else c.resolved()
            for f, c in self.calibrators.items()
            if f in self.features
        }
        self.medians = {str(k): float(v) for k, v in self.medians.items()}
        self.ranges = {str(k): (float(v[0]), float(v[1])) for k, v in self.ranges.items()}

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
            out[j] = impute_value(value, self.medians.get(name, math.nan), self.ranges.get(name))
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
            **({"ranges": {f: list(self.ranges[f]) for f in self.features if f in self.ranges}} if self.ranges else {}),
            "calibrators": {f: self.calibrators[f].to_dict() for f in self.features},
            **({"choices": self.choices()} if self.choices() else {}),
        }

    def choices(self) -> dict[str, dict[str, Any]]:
        """Feature → how its calibrator was chosen (:class:`~workbench.calibration.choice.CalibratorChoice` as a
        dict), for the features whose calibrator carries a record."""
        return {f: self.calibrators[f].choice for f in self.features if self.calibrators[f].choice is not None}

    @classmethod
    def from_dict(cls, d: Any) -> CalibratorSet:
        """Rebuild from :meth:`to_dict` output; DataError on a malformed dict (each calibrator is checked too)."""
        where = "calibrator set"
        if not isinstance(d, dict) or d.get("kind") != cls.kind:
            raise DataError(f"not a calibrator set (kind != {cls.kind!r})", where)
        if d.get("version") != cls.version:
            raise DataError(f"unsupported version {d.get('version')!r} (this workbench reads {cls.version})", where)
        extra = sorted(set(d) - {"kind", "version", "features", "medians", "ranges", "calibrators", "choices"})
        if extra:
            raise DataError(f"unknown key(s) {extra}", where)
        features, medians, calibrators = d.get("features"), d.get("medians", {}), d.get("calibrators")
        if not isinstance(features, list) or not features or not all(isinstance(f, str) for f in features):
            raise DataError("features must be a non-empty list of names", where)
        if not isinstance(calibrators, dict) or not isinstance(medians, dict):
            raise DataError("calibrators and medians must be mappings", where)
        for name, value in medians.items():
            if not _finite_number(value):
                raise DataError(f"median of {name!r} must be a finite number", where)
        ranges = d.get("ranges", {})
        if not isinstance(ranges, dict):
            raise DataError("ranges must be a mapping", where)
        for name, pair in ranges.items():
            if not (isinstance(pair, list) and len(pair) == 2 and all(_finite_number(v) for v in pair)):
                raise DataError(f"range of {name!r} must be [min, max], two finite numbers", where)
            if pair[0] > pair[1]:
                raise DataError(f"range of {name!r} has min {pair[0]} above max {pair[1]}", where)
        missing = [f for f in features if f not in calibrators]
        if missing:
            raise DataError(f"no calibrator for feature(s) {missing}", where)
        built = {f: calibrator_from_dict(calibrators[f]) for f in features}
        _attach_choices(d.get("choices", {}), built, where)
        return cls(tuple(features), built, medians, ranges)


def _attach_choices(choices: Any, calibrators: dict[str, Calibrator], where: str) -> None:
    """Check each saved choice record (:meth:`CalibratorChoice.from_dict`) and give it to its feature's calibrator;
    DataError for a record of an unknown feature or one whose chosen kind is not the calibrator's."""

    if not isinstance(choices, dict):
        raise DataError("choices must be a mapping of feature to record", where)
    for name, record in choices.items():
        if name not in calibrators:
            raise DataError("a choice record names a feature the set does not have", where)
        choice = CalibratorChoice.from_dict(record, f"{where}: choices")
        if choice.chosen != calibrators[name].kind:
            raise DataError("a choice record does not name the kind of its feature's calibrator", where)
        calibrators[name].choice = choice.to_dict()


def _finite_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def impute_value(value: float, median: float, value_range: tuple[float, float] | None) -> float:
    """The finite stand-in for one non-finite feature value: NaN → ``median``; +inf / −inf → the top / bottom of
    ``value_range`` (the fit split's finite range), or ``median`` without a range. Without a finite median either:
    NaN → 0 and ±inf → ±:data:`INF_CLIP`."""
    if not math.isnan(value) and value_range is not None:
        return value_range[1] if value > 0 else value_range[0]
    if math.isfinite(median):
        return median
    return 0.0 if math.isnan(value) else math.copysign(INF_CLIP, value)
