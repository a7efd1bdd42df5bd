"""The τ sweep plot: a router's routed score and retrieval rate against τ, with intervals and marked operating
points."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import workbench.plots.figure as figure


def tau_sweep_plot(
    path: Path,
    rows: Sequence[dict],
    *,
    marks: Mapping[str, float],
    references: Mapping[str, float],
    title: str,
    score: str,
) -> Path:
    """Save two panels sharing τ, each row a step over its ``tau_range``: the routed ``score`` (``quality`` of each
    row, its ``quality_interval`` shaded)
    with the ``references`` as dashed lines (name → score, e.g. Always-RAG, No-RAG), and the retrieval rate (its
    ``rate_interval`` shaded). ``marks`` (label → τ) draws a vertical line at each operating point, e.g. the shipped
    τ; a τ above 1 (always retrieve) is drawn at the right edge. ValueError without rows."""
    if not rows:
        raise ValueError("tau_sweep_plot: no rows to draw")
    plt = figure.pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.2, 5.2), dpi=110, sharex=True)
    # each row holds for τ in its (low, high] range: a step at every P(correct) value (its low end), the last row
    # drawn on to the right edge
    taus = [min(float((r.get("tau_range") or [r["tau"]])[0]), 1.0) for r in rows] + [1.0]
    ends = [*rows, rows[-1]]
    for ax, key, interval, colour, name in (
        (top, "quality", "quality_interval", "tab:blue", score),
        (bottom, "retrieval_rate", "rate_interval", "tab:green", "retrieval rate"),
    ):
        values = [r[key] for r in ends]
        ax.step(taus, values, where="post", color=colour, linewidth=1.3, label=name)
        lows = [(r[interval] or [r[key], r[key]])[0] for r in ends]
        highs = [(r[interval] or [r[key], r[key]])[1] for r in ends]
        ax.fill_between(taus, lows, highs, step="post", color=colour, alpha=0.18, label=f"{name}: 90% interval")
    styles = ("dashed", "dotted", "dashdot")
    for j, (name, value) in enumerate(references.items()):
        top.axhline(value, color="black", linewidth=0.8, linestyle=styles[j % len(styles)], label=f"{name} {value:.3f}")
    colours = ("tab:red", "tab:purple", "tab:brown")
    for j, (label, tau) in enumerate(marks.items()):
        x = min(float(tau), 1.0)
        text = f"{label}: τ > 1 (always)" if tau > 1.0 else f"{label}: τ = {tau:.3f}"
        for ax in (top, bottom):
            ax.axvline(
                x,
                color=colours[j % len(colours)],
                linewidth=1.1,
                linestyle=(0, (4, 2)) if j else "-",
                label=text if ax is top else None,
            )
    top.set_ylabel(score)
    bottom.set_ylabel("retrieval rate")
    bottom.set_xlabel("τ (retrieve iff P(correct) < τ)")
    bottom.set_ylim(-0.02, 1.02)
    top.set_title(title, fontsize=10)
    handles, labels = [], []
    for ax in (top, bottom):
        h, lab = ax.get_legend_handles_labels()
        handles, labels = handles + h, labels + lab
    bottom.legend(handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, frameon=False)
    return figure.finish(plt, fig, [top, bottom], path)
