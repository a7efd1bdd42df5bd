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


REFERENCE_MARKERS = {"No-RAG": "s", "Always-RAG": "D", "Oracle": "P"}
"""Each reference its own marker, so they never share a label on the plot."""


def front_series(points: Sequence[dict], picked: dict | None, max_routers: int = 8) -> list[tuple[str, list[dict]]]:
    """The single-step ``points`` grouped by router (``name``), in legend order: the picked router's first, then in
    order of first appearance; past ``max_routers`` the rest share one group, ``other routers``."""
    groups: dict[str, list[dict]] = {}
    for point in points:
        if point.get("kind") == "single":
            groups.setdefault(str(point["name"]), []).append(point)
    order = list(groups)
    if picked is not None and picked.get("name") in groups:
        order.remove(picked["name"])
        order.insert(0, picked["name"])
    series = [(name, groups[name]) for name in order[:max_routers]]
    rest = [p for name in order[max_routers:] for p in groups[name]]
    if rest:
        series.append((f"other routers ({len(order) - max_routers})", rest))
    return series


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
    max_routers: int = 8,
) -> Path:
    """Save routers on the cost–quality plane (``scalar`` cost, ``quality``): the single-step routers as dots, one
    colour and legend entry per router (:func:`front_series`), cascades (``kind == "cascade"``) as triangles, the
    Pareto ``front`` as a step line, each of the ``references`` (No-RAG, Always-RAG, Oracle) with its own marker and
    a legend entry giving its score and cost, and the ``picked`` router as a star named in the legend with its τ.
    Every name is in the legend below the axes — no text is written on the plane, so nothing overprints however
    close the points lie (Always-RAG and Oracle often share a score)."""
    if not points and not references:
        raise ValueError("cost_quality_front: nothing to plot")
    plt = figure.pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 5.4), dpi=110)
    colours = plt.get_cmap("tab10").colors
    for j, (name, group) in enumerate(front_series(points, picked, max_routers)):
        other = name.startswith("other routers")
        ax.scatter(
            [p["scalar"] for p in group],
            [p["quality"] for p in group],
            s=12,
            marker="o",
            color="tab:gray" if other else colours[j % len(colours)],
            alpha=0.5 if other else 0.75,
            label=name,
        )
    cascades = [p for p in points if p.get("kind") == "cascade"]
    if cascades:
        ax.scatter(
            [p["scalar"] for p in cascades],
            [p["quality"] for p in cascades],
            s=12,
            marker="^",
            color="tab:orange",
            alpha=0.45,
            label="cascades (measured, not shipped)",
        )
    if front:
        xs = [p["scalar"] for p in front]
        ys = [p["quality"] for p in front]
        ax.step(xs, ys, where="post", color="tab:blue", linewidth=1.0, alpha=0.7, label="Pareto front")
    for ref in references:
        ax.scatter(
            [ref["scalar"]],
            [ref["quality"]],
            color="black",
            marker=REFERENCE_MARKERS.get(ref["name"], "X"),
            s=30,
            zorder=5,  # above the picked star, which often sits on Always-RAG
            facecolors="none" if ref["name"] == "Oracle" else "black",
            label=f"{ref['name']}: {ref['quality']:.3f} at {ref['scalar']:.3g}",
        )
    if picked is not None:
        tau = picked.get("tau")
        where = "τ > 1, always retrieves" if tau is not None and tau > 1.0 else f"τ = {tau:.3f}" if tau else ""
        ax.scatter(
            [picked["scalar"]],
            [picked["quality"]],
            marker="*",
            s=260,
            color="tab:red",
            alpha=0.8,
            zorder=4,
            label=f"picked: {picked['name']} ({where})" if where else f"picked: {picked['name']}",
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    return figure.finish(plt, fig, [ax], path)
