"""Reliability diagrams: a grid of before/after calibration panels, and the calibration-transfer pair of
panels (AUROC bars beside a reliability diagram per condition)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import workbench.plots.figure as figure
from workbench.metrics.calibration import ece, reliability_table
from workbench.plots.bars import draw_bars


def reliability_grid(
    path: Path,
    panels: dict[str, tuple[Sequence[float], Sequence[float], Sequence[float]]],
    *,
    n_bins: int = 10,
    title: str,
) -> Path:
    """Save a grid of reliability diagrams, one panel per name, comparing probabilities before and after calibration.

    Each panel gets ``(before_probs, after_probs, labels)`` and shows, per non-empty equal-width bin, the mean
    predicted probability against the observed frequency (marker area grows with the bin count), for "before"
    and "after", with the diagonal (perfect calibration) dashed and each curve's ECE in the legend. At most four
    panels per row."""

    figure.require(panels, "panels", "reliability_grid")
    plt = figure.pyplot()
    n_cols = min(4, len(panels))
    n_rows = -(-len(panels) // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(3.0 * n_cols, 3.0 * n_rows + 0.3), dpi=110, squeeze=False)
    flat = list(axes.ravel())
    for ax, (name, (before, after, labels)) in zip(flat, panels.items(), strict=False):
        ax.plot([0.0, 1.0], [0.0, 1.0], linestyle="--", color="grey", linewidth=0.8)
        for label, probs, colour in (("before", before, "tab:orange"), ("after", after, "tab:blue")):
            table = reliability_table(probs, labels, n_bins)
            used = table.count > 0
            error = ece(probs, labels, n_bins)
            sizes = 12.0 + 80.0 * table.count[used] / max(1, int(table.count.max()))
            points = (table.mean_predicted[used], table.observed[used])
            ax.plot(*points, color=colour, linewidth=1.0, label=f"{label} (ECE {error:.3f})")
            ax.scatter(*points, s=sizes, color=colour, alpha=0.8, zorder=3)
        ax.set_xlim(0.0, 1.0)
        ax.set_ylim(0.0, 1.0)
        ax.set_aspect("equal")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("mean predicted", fontsize=8)
        ax.set_ylabel("observed frequency", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, frameon=False, loc="upper left")
    for ax in flat[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=10)
    return figure.finish(plt, fig, flat, path)


def transfer_panels(
    path: Path,
    groups: Sequence[str],
    aurocs: dict[str, Sequence[float | None]],
    reliability: dict[str, tuple[Sequence[float], Sequence[float]]],
    *,
    title: str,
    n_bins: int = 10,
    intervals: dict[str, Sequence[tuple[float, float] | None]] | None = None,
) -> Path:
    """Save two panels comparing conditions (e.g. in distribution vs shifted): left, AUROC bars per group (one bar per
    condition in ``aurocs``; a missing value draws no bar, 0.5 dashed; error bars where ``intervals`` gives a
    condition's ``(low, high)`` for a group); right, the reliability diagram of each
    condition's ``(probabilities, labels)`` in ``reliability`` (equal-width bins, marker area by count, ECE in the
    legend, the diagonal dashed)."""

    figure.require(aurocs, "conditions", "transfer_panels")
    plt = figure.pyplot()
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(max(7.5, 3.2 + 0.55 * len(groups) * len(aurocs)), 3.6), dpi=110, width_ratios=(1.6, 1.0)
    )
    draw_bars(left, groups, aurocs, intervals, labels=False)
    left.axhline(0.5, color="grey", linestyle="--", linewidth=0.8)
    left.set_xticks(range(len(groups)), groups, rotation=35, ha="right", fontsize=7)
    left.set_ylim(0.0, 1.0)
    left.set_ylabel("AUROC (correctness)")
    left.set_title("ranking", fontsize=9)
    left.legend(fontsize=7, frameon=False)
    right.plot([0.0, 1.0], [0.0, 1.0], linestyle="--", color="grey", linewidth=0.8)
    for label, (probs, labels) in reliability.items():
        table = reliability_table(probs, labels, n_bins)
        used = table.count > 0
        sizes = 12.0 + 80.0 * table.count[used] / max(1, int(table.count.max()))
        points = (table.mean_predicted[used], table.observed[used])
        (line,) = right.plot(*points, linewidth=1.0, label=f"{label} (ECE {ece(probs, labels, n_bins):.3f})")
        right.scatter(*points, s=sizes, color=line.get_color(), alpha=0.8, zorder=3)
    right.set_xlim(0.0, 1.0)
    right.set_ylim(0.0, 1.0)
    right.set_xlabel("mean predicted P(correct)", fontsize=8)
    right.set_ylabel("observed frequency", fontsize=8)
    right.set_title("reliability", fontsize=9)
    right.legend(fontsize=7, frameon=False, loc="upper left")
    fig.suptitle(title, fontsize=10)
    return figure.finish(plt, fig, [left, right], path)
