"""Curves: a training-loss curve, ROC curves (and the ROC points behind them), prediction-rejection curves."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

import workbench.plots.figure as figure
from workbench.metrics.ranking import auroc
from workbench.metrics.rejection import rejection_curve


def loss_curve(path: Path, curve: Sequence[dict], *, title: str, resumed_from: int | None = None) -> Path:
    """Save a training-loss curve: ``curve`` holds one point per optimizer step (``step``, ``epoch``, ``loss``);
    dotted lines mark where each later epoch starts, a dashed red one the step a resumed run started from."""
    plt = figure.pyplot()
    fig, ax = plt.subplots(figsize=(5.0, 3.0), dpi=110)
    ax.plot([p["step"] for p in curve], [p["loss"] for p in curve], linewidth=1.2, color="tab:blue")
    for epoch in sorted({p["epoch"] for p in curve})[1:]:
        first = min(p["step"] for p in curve if p["epoch"] == epoch)
        ax.axvline(first - 0.5, color="grey", linewidth=0.6, linestyle=":")
    if resumed_from:
        ax.axvline(resumed_from, color="tab:red", linewidth=0.8, linestyle="--", label="resumed")
        ax.legend(fontsize=7, frameon=False)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (target tokens)")
    ax.set_title(title, fontsize=9)
    return figure.finish(plt, fig, [ax], path)


def roc_points(scores: Sequence[float], labels: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """ROC curve of ``scores`` (higher = positive) for binary ``labels`` (read as ``label > 0.5``).

    Pairs holding a NaN are dropped. Scores are sorted in descending order and equal scores form one threshold,
    so a tie gives one diagonal step. Returns ``(fpr, tpr)`` starting at (0, 0) and ending at (1, 1); its
    trapezoid area equals :func:`workbench.metrics.ranking.auroc`. Raises ``ValueError`` on unequal lengths or
    when fewer than one positive and one negative remain.
    """
    s = np.asarray(scores, dtype=float).reshape(-1)
    y = np.asarray(labels, dtype=float).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"{s.size} scores but {y.size} labels: the two must have equal length")
    keep = ~np.isnan(s) & ~np.isnan(y)
    s, pos = s[keep], y[keep] > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"ROC needs both classes, got {n_pos} positives and {n_neg} negatives")
    order = np.argsort(-s, kind="stable")
    s_sorted, pos_sorted = s[order], pos[order]
    block_ends = np.r_[np.flatnonzero(s_sorted[1:] != s_sorted[:-1]), s.size - 1]
    tps = np.cumsum(pos_sorted)[block_ends]
    fps = block_ends + 1 - tps
    return np.r_[0.0, fps / n_neg], np.r_[0.0, tps / n_pos]


def roc_curves(path: Path, curves: dict[str, Sequence[float]], labels: Sequence[float], *, title: str) -> Path:
    """Save ROC curves (false- vs true-positive rate) of several scores against the same binary labels.

    Higher score = positive class (label 1); NaN pairs are dropped. Each legend entry carries the AUROC; a series
    with one class left (or all NaN) is not drawn and is listed as "(undefined)". The chance diagonal is dashed."""

    figure.require(curves, "curves", "roc_curves")
    plt = figure.pyplot()
    fig, ax = plt.subplots(figsize=(4.4, 4.6), dpi=110)  # room for the legend below the axes
    ax.plot([0.0, 1.0], [0.0, 1.0], linestyle="--", color="grey", linewidth=0.8, label="chance")
    for name, scores in curves.items():
        area = auroc(scores, labels)
        if np.isnan(area):
            ax.plot([], [], linestyle="none", label=f"{name} (undefined)")
            continue
        fpr, tpr = roc_points(scores, labels)
        ax.plot(fpr, tpr, linewidth=1.2, label=f"{name} (AUROC {area:.3f})")
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_xlabel("false-positive rate")
    ax.set_ylabel("true-positive rate")
    ax.set_title(title, fontsize=10)
    figure.legend_outside(ax, below=True)
    return figure.finish(plt, fig, [ax], path)


def rejection_curves(path: Path, curves: dict[str, Sequence[float]], quality: Sequence[float], *, title: str) -> Path:
    """Save prediction-rejection curves: mean quality of the kept examples vs the share rejected (least confident
    first), one per confidence series, with the "oracle" (confidence = quality) and "random" (mean quality) lines.

    NaN pairs are dropped per series; a series with nothing left is listed as "(undefined)"."""

    figure.require(curves, "curves", "rejection_curves")
    plt = figure.pyplot()
    q = np.asarray(quality, dtype=float).reshape(-1)
    fig, ax = plt.subplots(figsize=(4.8, 4.4), dpi=110)  # room for the legend below the axes
    for name, confidence in curves.items():
        rates, kept = rejection_curve(confidence, q)
        if rates.size == 0:
            ax.plot([], [], linestyle="none", label=f"{name} (undefined)")
            continue
        ax.plot(rates, kept, linewidth=1.2, label=name)
    rates, kept = rejection_curve(q, q)
    if rates.size:
        ax.plot(rates, kept, color="black", linestyle=":", linewidth=1.0, label="oracle")
        ax.axhline(float(np.nanmean(q)), color="grey", linestyle="--", linewidth=0.8, label="random")
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("rejection rate")
    ax.set_ylabel("mean quality of kept")
    ax.set_title(title, fontsize=10)
    figure.legend_outside(ax, below=True)
    return figure.finish(plt, fig, [ax], path)
