"""Ranking metrics for uncertainty scores: how well a score separates correct from incorrect answers.

The AUROC is scikit-learn's ``roc_auc_score``, wrapped for the workbench's conventions (NaN pairs dropped,
one class → NaN). :func:`auroc_rows` is its vectorised form for bootstrap resamples (the Mann-Whitney identity on
scipy's ranks, tested equal to ``roc_auc_score``), because thousands of ``roc_auc_score`` calls take minutes.
scikit-learn and scipy are imported inside the functions, not at module level: this module is imported by the
plots, the routing search and the stages, and nothing on the runtime or ``workbench --help`` path should pay for
(or need) them before an AUROC is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def auroc(scores: Sequence[float], labels: Sequence[float]) -> float:
    """Area under the ROC curve of ``scores`` (higher = more likely positive) for binary ``labels``.

    ``sklearn.metrics.roc_auc_score(labels > 0.5, scores)``: the Mann-Whitney probability that a random positive
    outscores a random negative, ties counting one half. Pairs whose score or label is NaN are dropped; ±inf scores
    rank below / above every finite one (they are replaced by their rank, which leaves the area unchanged). Returns
    NaN when fewer than one positive and one negative remain (one-class labels). Labels are read as
    ``label > 0.5``. Raises ``ValueError`` when the two lengths differ.
    """
    s = np.asarray(scores, dtype=float).reshape(-1)
    y = np.asarray(labels, dtype=float).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"{s.size} scores but {y.size} labels")
    keep = ~np.isnan(s) & ~np.isnan(y)
    s, pos = s[keep], y[keep] > 0.5
    n_pos = int(pos.sum())
    if n_pos == 0 or n_pos == pos.size:
        return float("nan")
    if np.isinf(s).any():
        s = np.unique(s, return_inverse=True)[1].astype(float)  # dense ranks: same order, same ties
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(pos, s))


def auroc_rows(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """:func:`auroc` of every row at once, for bootstrap resamples: ``scores`` / ``labels`` of shape ``(..., n)``
    give an array of shape ``(...)``.

    A bootstrap interval needs the AUROC of thousands of resamples, and ``roc_auc_score``'s input checks cost
    about 3 ms a call (minutes per report table). So this vectorised form uses the identity that defines the
    AUROC as a Mann-Whitney statistic, ``(R₊ − P(P+1)/2) / (P·N)`` with ``R₊`` the sum of the positives' average
    ranks (``scipy.stats.rankdata``) among the row's P positives and N negatives; it gives ``roc_auc_score``'s
    value (tested equal on random resamples with ties, NaN and ±inf). Same conventions as :func:`auroc`: NaN pairs
    dropped per row, labels read as ``> 0.5``, NaN for a row with one class.
    """
    from scipy.stats import rankdata

    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=float)
    if s.shape != y.shape:
        raise ValueError(f"scores of shape {s.shape} but labels of shape {y.shape}")
    valid = ~np.isnan(s) & ~np.isnan(y)
    pos = valid & (y > 0.5)
    n_pos = pos.sum(axis=-1)
    n_neg = valid.sum(axis=-1) - n_pos
    ranks = rankdata(np.where(valid, s, np.nan), axis=-1, nan_policy="omit")
    rank_sum = np.where(pos, ranks, 0.0).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)
    return np.where((n_pos > 0) & (n_neg > 0), out, np.nan)
