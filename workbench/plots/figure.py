"""What every plot shares: matplotlib on the Agg backend, imported only when a figure is drawn, and one way to
finish a figure (spines, layout, PNG, close)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` with the non-interactive Agg backend selected (imported on first call)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def require(mapping: dict, what: str, func: str) -> None:
    """Raise ``ValueError`` naming ``func`` and ``what`` when ``mapping`` is empty (nothing to draw)."""
    if not mapping:
        raise ValueError(f"{func}: no {what} given, need at least one")


def legend_outside(ax: Any, *, below: bool = False) -> None:
    """Put ``ax``'s legend outside the axes — to the right, or ``below`` it — where it covers no bar, curve or printed
    value (the layout makes room for it)."""
    if below:  # two columns when the entries are short enough to sit side by side within the figure
        longest = max((len(label) for label in ax.get_legend_handles_labels()[1]), default=0)
        ncol = 2 if longest <= 28 else 1
        ax.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=ncol)
    else:
        ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def finish(plt: Any, fig: Any, ax_list: list, path: Path) -> Path:
    """Hide top/right spines of ``ax_list``, lay out, wrap any title that would be cut at the figure's edge
    (:func:`fit_titles`), create the parent folder, save ``fig`` as a PNG at ``path`` and close it; return ``path``."""
    for ax in ax_list:
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fit_titles(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def fit_titles(fig: Any, margin: float = 4.0) -> None:
    """Wrap every axes title and figure title (``suptitle``) of ``fig`` that reaches past the figure's left or right
    edge (less ``margin`` pixels) onto more lines, narrow enough to fit around where it is centred, and lay the
    figure out again. A title is centred on its axes, which long tick labels push off the figure's centre — the way
    a long title got cut; a title that fits is left as it is."""
    renderer = fig.canvas.get_renderer()
    left, right = fig.bbox.x0 + margin, fig.bbox.x1 - margin
    texts = [ax.title for ax in fig.axes] + list(fig.texts)
    for text in texts:
        words = " ".join(text.get_text().split())
        for _ in range(6):  # each pass narrows the lines; a single word that cannot fit stops it
            box = text.get_window_extent(renderer)
            if not words or (box.x0 >= left and box.x1 <= right):
                break
            centre = (box.x0 + box.x1) / 2
            room = 2 * max(1.0, min(centre - left, right - centre))
            longest = max(len(line) for line in text.get_text().split("\n"))
            chars = max(8, int(longest * room / box.width) - 1)
            wrapped = textwrap.fill(words, chars)
            if wrapped == text.get_text():
                break
            text.set_text(wrapped)
            fig.tight_layout()
