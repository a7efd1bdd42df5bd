"""Uncertainty features (layer 4): the stat names contract, pure-numpy features over stats, and their registry.

* :mod:`workbench.uncertainty.stats` — the names, types and shapes of the stats the stats graph computes.
* :mod:`workbench.uncertainty.features` — ``FEATURES``, ``get_features``, ``required_stats``, ``compute_features``.
* :mod:`workbench.uncertainty.clustering` / :mod:`workbench.uncertainty.graph_math` — the shared maths.
"""

from __future__ import annotations

from workbench.uncertainty.features import (
    FEATURES,
    SEED_FEATURES,
    Feature,
    LarsLikeScorer,
    compute_features,
    get_features,
    required_stats,
)
from workbench.uncertainty.stats import STATS, MissingStatError, StatSpec

__all__ = [
    "FEATURES",
    "SEED_FEATURES",
    "STATS",
    "Feature",
    "LarsLikeScorer",
    "MissingStatError",
    "StatSpec",
    "compute_features",
    "get_features",
    "required_stats",
]
