"""Fixtures the unit tests of several packages share: the axes of the figures the report plots draw."""

from __future__ import annotations

import pytest


@pytest.fixture
def drawn(monkeypatch):
    """The axes of every figure the plots module saves (captured just before saving), in order."""
    import workbench.plots.figure as figure

    axes = []
    original = figure.finish

    def capture(plt, fig, ax_list, path):
        axes.extend(ax_list)
        return original(plt, fig, ax_list, path)

    monkeypatch.setattr(figure, "finish", capture)
    return axes
