"""Bar charts: grouped bars (with error bars where intervals exist), horizontal (signed) bars, and side-by-side bar
panels with their own units."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import workbench.plots.figure as figure

Interval = tuple[float, float] | None
"""A bar's interval ``(low, high)`` in the bar's units; None: not measured (no error bar)."""


def value_format(values: Sequence[float]) -> str:
    """How a chart prints its bars' values: whole numbers when every value is one and some exceed 1 (counts: rows,
    pairs), else two decimals (rates, scores — a rate of exactly 1 still prints ``1.00``)."""
    finite = [float(v) for v in values if v is not None and np.isfinite(v)]
    counts = bool(finite) and all(v.is_integer() for v in finite) and max(abs(v) for v in finite) > 1
    return "{:.0f}" if counts else "{:.2f}"


def draw_bars(
    ax: Any,
    groups: Sequence[str],
    series: dict[str, Sequence[float | None]],
    intervals: dict[str, Sequence[Interval]] | None = None,
    *,
    labels: bool = True,
) -> None:
    """Draw grouped bars on ``ax``: one group per entry of ``groups``, one bar per series (a None / NaN value draws
    no bar and no label); a series in ``intervals`` gets error bars from each bar's ``(low, high)``, and its printed
    value sits above the interval's top so the two never overlap."""
    width = 0.8 / max(1, len(series))
    number = value_format([np.nan if v is None else v for values in series.values() for v in values])
    for i, (label, values) in enumerate(series.items()):
        xs = np.arange(len(groups)) + (i - (len(series) - 1) / 2) * width
        heights = np.asarray([np.nan if v is None else float(v) for v in values], dtype=float)
        ax.bar(xs, heights, width=width, label=label)
        tops = np.where(np.isfinite(heights), np.maximum(heights, 0.0), np.nan)
        bounds = (intervals or {}).get(label)
        if bounds is not None:
            low = np.asarray([np.nan if b is None else b[0] for b in bounds], dtype=float)
            high = np.asarray([np.nan if b is None else b[1] for b in bounds], dtype=float)
            shown = np.isfinite(low) & np.isfinite(high) & np.isfinite(heights)
            if shown.any():
                errors = np.vstack([heights - low, high - heights])[:, shown]
                ax.errorbar(
                    xs[shown],
                    heights[shown],
                    yerr=np.clip(errors, 0.0, None),
                    fmt="none",
                    ecolor="black",
                    elinewidth=0.8,
                    capsize=2.5,
                )
                tops = np.where(shown, np.maximum(high, tops), tops)
        if labels:
            for x, top, value in zip(xs, tops, heights, strict=True):
                if np.isfinite(value):
                    ax.annotate(
                        number.format(value),
                        (x, top),
                        xytext=(0, 1.5),
                        textcoords="offset points",
                        ha="center",
                        va="bottom",
                        fontsize=7,
                    )


def grouped_bars(
    path: Path,
    groups: Sequence[str],
    series: dict[str, Sequence[float]],
    *,
    title: str,
    ylabel: str,
    ylim: tuple[float, float] | None = (0.0, 1.0),
    rotate: int = 0,
    intervals: dict[str, Sequence[Interval]] | None = None,
    reference: tuple[float, str] | None = None,
) -> Path:
    """Save a grouped bar chart: one group per entry of ``groups``, one bar per series; values printed on bars. A NaN
    value (a series not measured in that group) draws no bar and no label.

    ``intervals`` gives error bars for the series it names (one ``(low, high)`` or None per group; the figure says
    what they are in its title or caption); ``reference`` = ``(y, label)`` draws a dashed line (e.g. 0.5, chance);
    ``rotate`` turns the group labels by that many degrees (for many or long labels). With ``ylim``, the top grows
    just enough to keep the printed values inside the plot."""
    plt = figure.pyplot()
    width = min(12.0, max(4.5, 0.7 * len(groups) * max(1, len(series))))  # wider with more bars, never a banner
    legend = 1.3 if len(series) + (reference is not None) > 1 else 0.0  # the legend's column right of the axes
    fig, ax = plt.subplots(figsize=(width + legend, 3.2), dpi=110)
    draw_bars(ax, groups, series, intervals)
    if reference is not None:
        ax.axhline(reference[0], color="grey", linestyle="--", linewidth=0.8, label=reference[1])
    ax.set_xticks(range(len(groups)), groups, rotation=rotate, ha="right" if rotate else "center")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if ylim is not None:
        ax.set_ylim(ylim[0], ylim[1] + 0.08 * (ylim[1] - ylim[0]))  # room for the values printed over a full bar
        ax.set_yticks([t for t in ax.get_yticks() if ylim[0] <= t <= ylim[1]])
    else:
        ax.margins(y=0.12)
    if len(ax.get_legend_handles_labels()[0]) > 1:  # one entry: the title and axis say what it is
        figure.legend_outside(ax)
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
        ax.bar_label(bars, fmt=value_format(heights), fontsize=7, padding=1)
        ax.set_xticks(range(len(groups)), groups, rotation=rotate, ha="right" if rotate else "center", fontsize=8)
        ax.set_ylabel(unit)
        ax.set_title(name, fontsize=9)
    fig.suptitle(title, fontsize=10)
    return figure.finish(plt, fig, list(axes[0]), path)
