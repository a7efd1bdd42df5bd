"""The feature registry: every uncertainty feature by name, with its declared stats and orientation.

``FEATURES`` maps a name to a feature instance with the spec's default hyper-parameters. :data:`SEED_FEATURES`
lists the 18 features of the seed papers' feature set (D²-RAG's feature vector u, in its column order: spec §3.1);
``dtr_nll`` (DTR) and ``dense`` (DENSE-RAG) complete the set. See docs/features.md for the table of formulas and
substitutions.

Other packages add features through the ``workbench.features`` entry point (:mod:`~workbench.uncertainty.features.
plugins`, docs/adding-a-feature.md): :func:`get_features`, :func:`required_stats` and :func:`compute_features` resolve
a name that is not built in by loading the installed plugin that declares it; ``FEATURES`` holds the built-in ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from workbench.core.errors import ConfigError
from workbench.uncertainty.features.base import CATEGORIES, PLUGIN_PACKAGES, Feature
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
from workbench.uncertainty.features.plugins import check_recorded_plugin, load_plugin, plugin_names
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

SEED_FEATURES: tuple[str, ...] = tuple(f.name for f in _ALL[:18])
"""The 18 features of the seed papers' feature set, in the column order of D²-RAG's feature vector u (spec §3.1,
rows 0–17): the default of the feature benchmarks."""


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


def find_feature(name: str) -> Feature | None:
    """The built-in feature ``name``, else the one an installed plugin declares under it (loaded once), else None.

    ConfigError naming the entry point when that plugin is broken (:func:`~workbench.uncertainty.features.plugins.
    load_plugin`)."""
    return FEATURES.get(name) or load_plugin(name)


def get_features(names: Iterable[str] | None = None) -> list[Feature]:
    """The features named in ``names`` (in that order): built-in ones, and plugins' for the other names; every
    built-in feature when ``names`` is None.

    Raises :class:`~workbench.core.errors.ConfigError` naming the unknown names and listing the known ones (the
    installed plugins' too), or naming the entry point of a broken plugin.
    """
    if names is None:
        return list(_ALL)
    names = list(names)
    found = {n: find_feature(n) for n in dict.fromkeys(names)}
    unknown = [n for n in names if found[n] is None]
    if unknown:
        plugins = plugin_names()
        extra = f"; installed plugins: {plugins}" if plugins else ""
        raise ConfigError(f"unknown feature(s) {unknown}; known: {sorted(FEATURES)}{extra}", "features")
    return [found[n] for n in names]


def plugin_versions(names: Iterable[Any]) -> dict[str, dict[str, str]]:
    """``{feature: {"package", "package_version", "version"}}`` for the plugin features among ``names`` (built-in
    names, and names no installed package declares, are left out): what a stage that computes them keys its cache on,
    so upgrading a plugin re-runs it. Empty (and no entry point read) when every name is built in."""
    out = {}
    for name in names:
        feature = find_feature(name) if isinstance(name, str) and name not in FEATURES else None
        if feature is not None:
            package = PLUGIN_PACKAGES[name]
            out[name] = {"package": package["name"], "package_version": package["version"], "version": feature.version}
    return out


def check_recorded_features(records: Iterable[Any], where: str) -> None:
    """Refuse (DataError at ``where``) a bundle whose ``features`` records name a plugin feature this installation
    cannot run as it was collected: its package is not installed (the message names the feature and the package),
    or the installed one has another version of it. Records of built-in features pass unchanged; only the installed
    package's code runs, nothing from the bundle."""
    for record in records:
        if isinstance(record, Mapping):
            check_recorded_plugin(record, FEATURES, where)


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
    "FEATURES",
    "SEED_FEATURES",
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
    "check_recorded_features",
    "compute_features",
    "find_feature",
    "get_features",
    "parse_verbalized_confidence",
    "plugin_versions",
    "required_stats",
]
