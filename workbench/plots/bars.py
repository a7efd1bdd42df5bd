"""Bar charts: grouped bars, horizontal (signed) bars, and side-by-side bar panels with their own units."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

import workbench.plots.figure as figure


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
    """Save a grouped bar chart: one group per entry of ``groups``, one bar per series; values printed on bars. A NaN
    value (a series not measured in that group) draws no bar and no label.

    ``rotate`` turns the group labels by that many degrees (for many or long labels)."""
    plt = figure.pyplot()
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(4.5, 1.4 * len(groups) * max(1, len(series)) / 2), 3.2), dpi=110)
    for i, (label, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, values, width=width, label=label)
        texts = [f"{v:.2f}" if np.isfinite(v) else "" for v in np.asarray(values, dtype=float)]
        ax.bar_label(bars, labels=texts, fontsize=7, padding=1)
    ax.set_xticks(range(len(groups)), groups, rotation=rotate, ha="right" if rotate else "center")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.legend(fontsize=8, frameon=False)
    return figure.finish(plt, fig, [ax], path)


def horizontal_bars(path: Path, values: dict[str, float], *, title: str, xlabel: str, signed: bool = True) -> Path:
    """Save a horizontal bar chart, one bar per name sorted by value (largest on top), values printed on the bars.

    With ``signed`` negative bars get a second colour and a line marks zero (e.g. logistic-regression weights).
    The height grows with the number of bars."""
    figure.require(values, "values", "horizontal_bars")
    plt = figure.pyplot()
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
    return figure.finish(plt, fig, [ax], path)


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
    figure.require(panels, "panels", "unit_panels")
    plt = figure.pyplot()
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
    return figure.finish(plt, fig, list(axes[0]), path)
