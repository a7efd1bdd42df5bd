"""Calibration metrics for predicted probabilities: expected calibration error, reliability table, Brier score.

``probabilities`` are predicted P(label = 1) in [0, 1]; ``labels`` are the observed outcomes in [0, 1] (0/1, or a
soft quality, whose bin mean is then the observed frequency). Pairs where either value is NaN are dropped;
arrays of unequal length or values outside [0, 1] raise ``ValueError``; an empty input gives ``nan``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from workbench.metrics.rejection import _paired

_STRATEGIES = ("uniform", "quantile")


class ReliabilityTable(NamedTuple):
    """Per-bin summary for a reliability diagram (NaN means in empty bins; ``edges`` has ``n_bins + 1`` values)."""

    mean_predicted: np.ndarray
    observed: np.ndarray
    count: np.ndarray
    edges: np.ndarray


def _probabilities(probabilities: Sequence[float], labels: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    p, y = _paired(probabilities, labels, "probability", "label")
    if p.size and (p.min() < 0.0 or p.max() > 1.0):
        raise ValueError(f"probabilities must lie in [0, 1], got values in [{p.min()}, {p.max()}]")
    if y.size and (y.min() < 0.0 or y.max() > 1.0):
        raise ValueError(f"labels must lie in [0, 1], got values in [{y.min()}, {y.max()}]")
    return p, y


def reliability_table(
    probabilities: Sequence[float], labels: Sequence[float], n_bins: int = 10, strategy: str = "uniform"
) -> ReliabilityTable:
    """Bin the predictions and report, per bin, the mean prediction, the observed frequency and the count.

    Bins are right-closed, ``(e_{b}, e_{b+1}]``, the first one also holding ``e_0``. ``strategy="uniform"``:
    edges ``linspace(0, 1, n_bins + 1)``; ``"quantile"``: edges at the ``linspace(0, 1, n_bins + 1)`` quantiles
    of the predictions (repeated edges leave empty bins). ``observed[b]`` = mean label in bin b.
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be at least 1, got {n_bins}")
    if strategy not in _STRATEGIES:
        raise ValueError(f"strategy must be one of {_STRATEGIES}, got {strategy!r}")
    p, y = _probabilities(probabilities, labels)
    grid = np.linspace(0.0, 1.0, n_bins + 1)
    edges = np.quantile(p, grid) if strategy == "quantile" and p.size else grid
    idx = np.searchsorted(edges[1:-1], p, side="left")
    count = np.bincount(idx, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_predicted = np.bincount(idx, weights=p, minlength=n_bins) / count
        observed = np.bincount(idx, weights=y, minlength=n_bins) / count
    return ReliabilityTable(mean_predicted, observed, count, edges)


def ece(probabilities: Sequence[float], labels: Sequence[float], n_bins: int = 10, strategy: str = "uniform") -> float:
    """Expected calibration error: ``ECE = Σ_b (n_b / N) · |observed_b - mean_predicted_b|`` over non-empty bins.

    Bins as in :func:`reliability_table` (equal-width by default, right-closed as in LM-Polygraph's ``ece``).
    Returns NaN when no pair remains.
    """
    table = reliability_table(probabilities, labels, n_bins, strategy)
    total = int(table.count.sum())
    if total == 0:
        return float("nan")
    used = table.count > 0
    gaps = np.abs(table.observed[used] - table.mean_predicted[used])
    return float((table.count[used] * gaps).sum() / total)


def brier(probabilities: Sequence[float], labels: Sequence[float]) -> float:
    """Brier score ``(1/N) · Σ_i (p_i - y_i)²`` (lower is better). Returns NaN when no pair remains."""
    p, y = _probabilities(probabilities, labels)
    if p.size == 0:
        return float("nan")
    return float(np.mean((p - y) ** 2))
