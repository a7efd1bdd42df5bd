"""Drift over time: each monitored series' PSI per window of answers, with the threshold it alarms above."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from workbench.plots.figure import finish, legend_outside, pyplot, require


def drift_over_time(
    path: Path,
    psi: dict[str, Sequence[float | None]],
    alarm_at: float,
    *,
    xlabel: str,
    title: str,
    ylabel: str = "PSI against the bundle's reference",
    alarm_label: str | None = None,
) -> Path:
    """One line per series of ``psi`` (its PSI in each window, None where the window had too few values), a dashed
    line at ``alarm_at`` (the PSI alarm convention; labelled ``alarm_label``, default "alarm (PSI <alarm_at>)");
    saved as a PNG at ``path``. ``ylabel``: what the values are (another statistic may be drawn the same way)."""
    require(psi, "series", "drift_over_time")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4), dpi=110)
    for name, values in psi.items():
        xs = [i + 1 for i, v in enumerate(values) if v is not None]
        ax.plot(xs, [v for v in values if v is not None], marker="o", markersize=3, label=name)
    ax.axhline(alarm_at, color="black", linestyle="--", linewidth=1, label=alarm_label or f"alarm (PSI {alarm_at:g})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    legend_outside(ax)
    return finish(plt, fig, [ax], path)
