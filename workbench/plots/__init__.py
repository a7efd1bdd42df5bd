"""Every plot of the reports, one module per kind of figure (PNG files on the Agg backend; matplotlib is imported
only when a figure is drawn).

``figure`` holds what all plots share (:func:`~workbench.plots.figure.pyplot`,
:func:`~workbench.plots.figure.finish`); ``bars``, ``curves``, ``drift``, ``reliability``, ``heatmap``, ``scatter``,
``sweep`` and ``trials`` draw. Report writers import the drawing functions from here; no other module draws a figure.
"""

from __future__ import annotations

from workbench.plots.bars import grouped_bars, horizontal_bars, unit_panels
from workbench.plots.curves import loss_curve, rejection_curves, roc_curves, roc_points
from workbench.plots.drift import drift_over_time
from workbench.plots.heatmap import heatmap
from workbench.plots.reliability import reliability_grid, transfer_panels
from workbench.plots.scatter import cost_quality_front, scatter_with_thresholds
from workbench.plots.sweep import tau_sweep_plot
from workbench.plots.trials import history_plot, pareto_plot

__all__ = [
    "cost_quality_front",
    "drift_over_time",
    "grouped_bars",
    "heatmap",
    "history_plot",
    "horizontal_bars",
    "loss_curve",
    "pareto_plot",
    "rejection_curves",
    "reliability_grid",
    "roc_curves",
    "roc_points",
    "scatter_with_thresholds",
    "tau_sweep_plot",
    "transfer_panels",
    "unit_panels",
]
