"""Scatter plots: predicted vs true values with threshold lines, and routers on the cost–quality plane."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

import workbench.plots.figure as figure


def scatter_with_thresholds(
    path: Path,
    x: Sequence[float],
    y: Sequence[float],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    thresholds: Sequence[float] = (),
) -> Path:
    """Save a scatter of ``y`` against ``x`` with the diagonal y = x and dashed lines at each of ``thresholds`` on
    both axes (e.g. D²-RAG's τ_neg / τ_pos: the cells show where predicted and true utility classes agree)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.shape != ys.shape or xs.size == 0:
        raise ValueError(f"scatter_with_thresholds: need two equal, non-empty series, got {xs.shape} / {ys.shape}")
    plt = figure.pyplot()
    fig, ax = plt.subplots(figsize=(4.2, 4.0), dpi=110)
    ax.scatter(xs, ys, s=14, alpha=0.7)
    finite = np.concatenate([xs[np.isfinite(xs)], ys[np.isfinite(ys)]])
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (-1.0, 1.0)
    ax.plot([lo, hi], [lo, hi], color="grey", linewidth=0.8)
    for t in thresholds:
        ax.axhline(t, color="tab:red", linewidth=0.7, linestyle="--")
        ax.axvline(t, color="tab:red", linewidth=0.7, linestyle="--")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    return figure.finish(plt, fig, [ax], path)


def cost_quality_front(
    path: Path,
    points: Sequence[dict],
    front: Sequence[dict],
    references: Sequence[dict],
    picked: dict | None,
    *,
    title: str,
    xlabel: str,
    ylabel: str,
) -> Path:
    """Save routers on the cost–quality plane: every point (``scalar`` cost, ``quality``) in grey — single-step
    routers as dots, cascades (``kind == "cascade"``) as triangles — the Pareto ``front`` as a step line, the
    ``references`` (No-RAG, Always-RAG, Oracle) as labelled black marks and the ``picked`` router as a star."""
    if not points and not references:
        raise ValueError("cost_quality_front: nothing to plot")
    plt = figure.pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.2), dpi=110)
    for kind, marker, label in (("single", "o", "single-step router"), ("cascade", "^", "cascade")):
        chosen = [p for p in points if p.get("kind") == kind]
        if chosen:
            ax.scatter(
                [p["scalar"] for p in chosen],
                [p["quality"] for p in chosen],
                s=10,
                marker=marker,
                color="tab:gray" if kind == "single" else "tab:orange",
                alpha=0.45,
                label=label,
            )
    if front:
        xs = [p["scalar"] for p in front]
        ys = [p["quality"] for p in front]
        ax.step(xs, ys, where="post", color="tab:blue", linewidth=1.2, label="Pareto front")
    for ref in references:
        ax.scatter([ref["scalar"]], [ref["quality"]], color="black", marker="s", s=22, zorder=3)
        ax.annotate(
            ref["name"], (ref["scalar"], ref["quality"]), fontsize=7, xytext=(4, -9), textcoords="offset points"
        )
    if picked is not None:
        ax.scatter(
            [picked["scalar"]], [picked["quality"]], marker="*", s=140, color="tab:red", zorder=4, label="picked"
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    return figure.finish(plt, fig, [ax], path)
