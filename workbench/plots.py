"""Small matplotlib helpers for reports (Agg backend, PNG files, imported only when a report is written)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def grouped_bars(
    path: Path,
    groups: Sequence[str],
    series: dict[str, Sequence[float]],
    *,
    title: str,
    ylabel: str,
    ylim: tuple[float, float] | None = (0.0, 1.0),
    rotate: int = 0,
) -> Path:
    """Save a grouped bar chart: one group per entry of ``groups``, one bar per series; values printed on bars.

    ``rotate`` turns the group labels by that many degrees (for many or long labels)."""
    plt = _pyplot()
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(4.5, 1.4 * len(groups) * max(1, len(series)) / 2), 3.2), dpi=110)
    for i, (label, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, values, width=width, label=label)
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
    ax.set_xticks(range(len(groups)), groups, rotation=rotate, ha="right" if rotate else "center")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.legend(fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def loss_curve(path: Path, curve: Sequence[dict], *, title: str, resumed_from: int | None = None) -> Path:
    """Save a training-loss curve: ``curve`` holds one point per optimizer step (``step``, ``epoch``, ``loss``);
    dotted lines mark where each later epoch starts, a dashed red one the step a resumed run started from."""
    plt = _pyplot()
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
    return _finish(plt, fig, [ax], path)


def _require(mapping: dict, what: str, func: str) -> None:
    """Raise ``ValueError`` when ``mapping`` is empty (nothing to draw)."""
    if not mapping:
        raise ValueError(f"{func}: no {what} given, need at least one")


def _finish(plt, fig, ax_list, path: Path) -> Path:
    """Hide top/right spines, lay out, create the parent folder, save the PNG and close the figure."""
    for ax in ax_list:
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


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
    from workbench.metrics.calibration import ece, reliability_table

    _require(panels, "panels", "reliability_grid")
    plt = _pyplot()
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
    return _finish(plt, fig, flat, path)


def roc_curves(path: Path, curves: dict[str, Sequence[float]], labels: Sequence[float], *, title: str) -> Path:
    """Save ROC curves (false- vs true-positive rate) of several scores against the same binary labels.

    Higher score = positive class (label 1); NaN pairs are dropped. Each legend entry carries the AUROC; a series
    with one class left (or all NaN) is not drawn and is listed as "(undefined)". The chance diagonal is dashed."""
    from workbench.metrics.ranking import auroc

    _require(curves, "curves", "roc_curves")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.2, 3.8), dpi=110)
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
    ax.legend(fontsize=7, frameon=False, loc="lower right")
    return _finish(plt, fig, [ax], path)


def rejection_curves(path: Path, curves: dict[str, Sequence[float]], quality: Sequence[float], *, title: str) -> Path:
    """Save prediction-rejection curves: mean quality of the kept examples vs the share rejected (least confident
    first), one per confidence series, with the "oracle" (confidence = quality) and "random" (mean quality) lines.

    NaN pairs are dropped per series; a series with nothing left is listed as "(undefined)"."""
    from workbench.metrics.rejection import rejection_curve

    _require(curves, "curves", "rejection_curves")
    plt = _pyplot()
    q = np.asarray(quality, dtype=float).reshape(-1)
    fig, ax = plt.subplots(figsize=(4.8, 3.4), dpi=110)
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
    ax.legend(fontsize=7, frameon=False)
    return _finish(plt, fig, [ax], path)


def heatmap(path: Path, matrix, labels: Sequence[str], *, title: str, vmin: float = -1.0, vmax: float = 1.0) -> Path:
    """Save an annotated square heatmap of ``matrix`` (e.g. a correlation matrix), values printed to 2 decimals.

    Diverging colormap "RdBu_r" between ``vmin`` and ``vmax``; NaN cells are grey and left blank. ``labels`` name
    the rows and columns (x labels turned 45°)."""
    m = np.asarray(matrix, dtype=float)
    if m.size == 0:
        raise ValueError("heatmap: empty matrix, need at least one cell")
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"heatmap: matrix must be square, got shape {m.shape}")
    if len(labels) != m.shape[0]:
        raise ValueError(f"heatmap: {len(labels)} labels for a {m.shape[0]}x{m.shape[1]} matrix")
    plt = _pyplot()
    n = m.shape[0]
    side = max(3.2, 0.55 * n + 1.8)
    fig, ax = plt.subplots(figsize=(side + 0.6, side), dpi=110)
    cmap = plt.get_cmap("RdBu_r").with_extremes(bad="lightgrey")
    image = ax.imshow(np.ma.masked_invalid(m), cmap=cmap, vmin=vmin, vmax=vmax)
    font = 8 if n <= 10 else 6
    for i in range(n):
        for j in range(n):
            value = m[i, j]
            if np.isnan(value):
                continue
            strong = abs(value - (vmin + vmax) / 2.0) > 0.3 * (vmax - vmin)
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=font, color="white" if strong else "black")
    ax.set_xticks(range(n), labels, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(n), labels, fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04).ax.tick_params(labelsize=7)
    return _finish(plt, fig, [ax], path)


def horizontal_bars(path: Path, values: dict[str, float], *, title: str, xlabel: str, signed: bool = True) -> Path:
    """Save a horizontal bar chart, one bar per name sorted by value (largest on top), values printed on the bars.

    With ``signed`` negative bars get a second colour and a line marks zero (e.g. logistic-regression weights).
    The height grows with the number of bars."""
    _require(values, "values", "horizontal_bars")
    plt = _pyplot()
    items = sorted(values.items(), key=lambda kv: (not np.isnan(kv[1]), kv[1] if not np.isnan(kv[1]) else 0.0))
    names = [name for name, _ in items]
    numbers = np.array([value for _, value in items], dtype=float)
    colours = ["tab:red" if signed and v < 0 else "tab:blue" for v in numbers]
    fig, ax = plt.subplots(figsize=(5.2, max(2.0, 0.28 * len(items) + 1.0)), dpi=110)
    bars = ax.barh(range(len(items)), np.nan_to_num(numbers), color=colours, height=0.7)
    ax.bar_label(bars, labels=[f"{v:.3g}" for v in numbers], fontsize=7, padding=2)
    ax.set_yticks(range(len(items)), names, fontsize=8)
    if signed:
        ax.axvline(0.0, color="black", linewidth=0.6)
    ax.margins(x=0.15)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    return _finish(plt, fig, [ax], path)


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
    plt = _pyplot()
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
    return _finish(plt, fig, [ax], path)


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
    plt = _pyplot()
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
    return _finish(plt, fig, [ax], path)


def transfer_panels(
    path: Path,
    groups: Sequence[str],
    aurocs: dict[str, Sequence[float | None]],
    reliability: dict[str, tuple[Sequence[float], Sequence[float]]],
    *,
    title: str,
    n_bins: int = 10,
) -> Path:
    """Save two panels comparing conditions (e.g. in distribution vs shifted): left, AUROC bars per group (one bar per
    condition in ``aurocs``; a missing value draws no bar, 0.5 dashed); right, the reliability diagram of each
    condition's ``(probabilities, labels)`` in ``reliability`` (equal-width bins, marker area by count, ECE in the
    legend, the diagonal dashed)."""
    from workbench.metrics.calibration import ece, reliability_table

    _require(aurocs, "conditions", "transfer_panels")
    plt = _pyplot()
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(max(7.5, 3.2 + 0.55 * len(groups) * len(aurocs)), 3.6), dpi=110, width_ratios=(1.6, 1.0)
    )
    width = 0.8 / len(aurocs)
    for i, (label, values) in enumerate(aurocs.items()):
        xs = [g + (i - (len(aurocs) - 1) / 2) * width for g in range(len(groups))]
        heights = [np.nan if v is None else float(v) for v in values]
        left.bar(xs, heights, width=width, label=label)
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
    return _finish(plt, fig, [left, right], path)


def unit_panels(
    path: Path,
    groups: Sequence[str],
    panels: dict[str, tuple[Sequence[float], str]],
    *,
    title: str,
    rotate: int = 30,
) -> Path:
    """Save one bar panel per entry of ``panels`` (``{panel title: (values per group, y-axis unit)}``), side by side,
    each with its own y axis and unit (quantities of different units never share an axis); values printed on bars, a
    missing (None / NaN) value draws no bar."""
    _require(panels, "panels", "unit_panels")
    plt = _pyplot()
    width = max(4.0, 0.55 * len(groups) + 1.5)
    fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), 3.3), dpi=110, squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (ax, (name, (values, unit))) in enumerate(zip(axes[0], panels.items(), strict=True)):
        heights = [np.nan if v is None else float(v) for v in values]
        bars = ax.bar(range(len(groups)), heights, width=0.7, color=colors[i % len(colors)])
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
        ax.set_xticks(range(len(groups)), groups, rotation=rotate, ha="right" if rotate else "center", fontsize=8)
        ax.set_ylabel(unit)
        ax.set_title(name, fontsize=9)
    fig.suptitle(title, fontsize=10)
    return _finish(plt, fig, list(axes[0]), path)
