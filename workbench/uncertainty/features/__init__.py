"""The feature registry: every uncertainty feature by name, with its declared stats and orientation.

``FEATURES`` maps a name to a feature instance with the spec's default hyper-parameters. :data:`D2RAG_FEATURES`
lists the 18 D²-RAG features in the column order of the paper's feature vector u (spec §3.1); ``dtr_nll`` (DTR)
and ``dense`` (DENSE-RAG) complete the set. See docs/features.md for the table of formulas and substitutions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from workbench.core.errors import ConfigError
from workbench.uncertainty.features.base import CATEGORIES, Feature
from workbench.uncertainty.features.consistency import SelfDetection, SemanticEntropy
from workbench.uncertainty.features.dense import Dense
from workbench.uncertainty.features.dtr import DtrNll
from workbench.uncertainty.features.graph import (
    DirectionalEntailmentGraph,
    EccentricityConfidence,
    EccentricityUncertainty,
    MatrixDegreeConfidence,
    MatrixDegreeUncertainty,
    SumEigenUncertainty,
)
from workbench.uncertainty.features.internal import AttentionScore, Inside
from workbench.uncertainty.features.probability import (
    Confidence,
    Entropy,
    Lars,
    LarsLikeScorer,
    Mars,
    SentSar,
    TokenSar,
)
from workbench.uncertainty.features.self_check import PTrue, VerbalizedConfidence, parse_verbalized_confidence
from workbench.uncertainty.stats import STATS, MissingStatError

_ALL: tuple[Feature, ...] = (
    Entropy(),
    SemanticEntropy(),
    Mars(),
    Lars(),
    SentSar(),
    TokenSar(),
    Confidence(),
    Inside(),
    AttentionScore(),
    EccentricityUncertainty(),
    EccentricityConfidence(),
    MatrixDegreeConfidence(),
    MatrixDegreeUncertainty(),
    SumEigenUncertainty(),
    PTrue(),
    VerbalizedConfidence(),
    SelfDetection(),
    DirectionalEntailmentGraph(),
    DtrNll(),
    Dense(),
)

FEATURES: dict[str, Feature] = {f.name: f for f in _ALL}
"""Every registered feature by name (default hyper-parameters)."""

D2RAG_FEATURES: tuple[str, ...] = tuple(f.name for f in _ALL[:18])
"""The 18 D²-RAG features in the column order of u (spec §3.1, rows 0–17)."""


def _check_registry() -> None:
    """Fail at import if a feature breaks the contract (unique names, ±1 orientation, known stats and category)."""
    if len(FEATURES) != len(_ALL):
        raise RuntimeError("duplicate feature names in the registry")
    for f in _ALL:
        if f.orientation not in (1, -1) or f.category not in CATEGORIES or f.requires_gold:
            raise RuntimeError(f"feature {f.name!r} breaks the registry contract")
        unknown = set(f.stats) - set(STATS)
        if unknown:
            raise RuntimeError(f"feature {f.name!r} needs unknown stats {sorted(unknown)}")


_check_registry()


def get_features(names: Iterable[str] | None = None) -> list[Feature]:
    """The features named in ``names`` (in that order); every registered feature when ``names`` is None.

    Raises :class:`~workbench.core.errors.ConfigError` naming the unknown names and listing the known ones.
    """
    if names is None:
        return list(_ALL)
    names = list(names)
    unknown = [n for n in names if n not in FEATURES]
    if unknown:
        raise ConfigError(f"unknown feature(s) {unknown}; known: {sorted(FEATURES)}", "features")
    return [FEATURES[n] for n in names]


def required_stats(names: Iterable[str] | None = None) -> set[str]:
    """The union of the stat names the given features need (all features when ``names`` is None)."""
    return {s for f in get_features(names) for s in f.stats}


def compute_features(
    stats: Mapping[str, Any], names: Iterable[str] | None = None, on_missing: str = "raise"
) -> dict[str, float]:
    """Oriented values ``{name: feature.compute(stats)}`` (higher = more certain) for the given features.

    ``on_missing="raise"`` propagates :class:`~workbench.uncertainty.stats.MissingStatError`; ``"nan"`` records NaN
    for a feature whose stats are missing (the collector then counts it; calibration maps NaN → 0, spec §13.16).
    """
    if on_missing not in ("raise", "nan"):
        raise ValueError(f"on_missing must be 'raise' or 'nan', got {on_missing!r}")
    out: dict[str, float] = {}
    for feature in get_features(names):
        try:
            out[feature.name] = feature.compute(stats)
        except MissingStatError:
            if on_missing == "raise":
                raise
            out[feature.name] = float("nan")
    return out


__all__ = [
    "D2RAG_FEATURES",
    "FEATURES",
    "AttentionScore",
    "Confidence",
    "Dense",
    "DirectionalEntailmentGraph",
    "DtrNll",
    "EccentricityConfidence",
    "EccentricityUncertainty",
    "Entropy",
    "Feature",
    "Inside",
    "Lars",
    "LarsLikeScorer",
    "Mars",
    "MatrixDegreeConfidence",
    "MatrixDegreeUncertainty",
    "PTrue",
    "SelfDetection",
    "SemanticEntropy",
    "SentSar",
    "SumEigenUncertainty",
    "TokenSar",
    "VerbalizedConfidence",
    "compute_features",
    "get_features",
    "parse_verbalized_confidence",
    "required_stats",
]
