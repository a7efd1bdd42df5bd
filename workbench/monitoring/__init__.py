"""Drift monitoring of a shipped bundle (docs/monitoring.md): the reference distributions a bundle carries, the drift
statistics of a window of served answers against them, the answer log ``serve`` can write, and the offline report.

One implementation for every reader: ``serve``'s ``/metrics`` and ``/drift`` (:mod:`workbench.serve.monitor_routes`),
``workbench monitor`` (:mod:`workbench.monitoring.offline`), and whatever later scores or recalibrates against the
reference. Modules: :mod:`~workbench.monitoring.reference` (what the bundle stores, built at export),
:mod:`~workbench.monitoring.drift` (PSI and KS of a window), :mod:`~workbench.monitoring.window` (the rolling window
``serve`` keeps), :mod:`~workbench.monitoring.answer_log` (the log record schema), :mod:`~workbench.monitoring.offline`.
Importing this package imports nothing heavy.
"""
