"""Test helpers for the report plots: what a figure drew, read back from its matplotlib objects (the ``drawn``
fixture, in ``tests/unit/conftest.py``, captures the axes)."""

from __future__ import annotations


def error_bars(ax) -> list[tuple[float, float, float]]:
    """``(x, low, high)`` of every error bar drawn on ``ax``."""
    from matplotlib.container import ErrorbarContainer

    out = []
    for container in ax.containers:
        if isinstance(container, ErrorbarContainer):
            for collection in container.lines[2]:
                out += [(seg[0][0], seg[0][1], seg[1][1]) for seg in collection.get_segments()]
    return out
