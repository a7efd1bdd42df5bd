"""Ranking metrics for uncertainty scores: how well a score separates correct from incorrect answers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def auroc(scores: Sequence[float], labels: Sequence[float]) -> float:
    """Area under the ROC curve of ``scores`` (higher = more likely positive) for binary ``labels``.

    Computed as the Mann-Whitney probability that a random positive outscores a random negative, ties counting
    one half (average ranks). Pairs whose score is NaN are dropped (±inf rank normally). Returns NaN when fewer
    than one positive and one negative remain (one-class labels). Labels are read as ``label > 0.5``.
    """
    s = np.asarray(scores, dtype=float).reshape(-1)
    y = np.asarray(labels, dtype=float).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"{s.size} scores but {y.size} labels")
    keep = ~np.isnan(s) & ~np.isnan(y)
    s, pos = s[keep], y[keep] > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(s.size, dtype=float)
    sorted_s = s[order]
    i = 0
    while i < s.size:
        j = i
        while j + 1 < s.size and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))
