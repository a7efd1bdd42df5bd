"""What every plot shares: matplotlib on the Agg backend, imported only when a figure is drawn, and one way to
finish a figure (spines, layout, PNG, close)."""

from __future__ import annotations

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


def finish(plt: Any, fig: Any, ax_list: list, path: Path) -> Path:
    """Hide top/right spines of ``ax_list``, lay out, create the parent folder, save ``fig`` as a PNG at ``path``
    and close it; return ``path``."""
    for ax in ax_list:
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
