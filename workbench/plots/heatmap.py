"""An annotated square heatmap (e.g. a correlation matrix)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

import workbench.plots.figure as figure


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
    plt = figure.pyplot()
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
    return figure.finish(plt, fig, [ax], path)
