"""Every report writer, one module per report (named by what it reports): each reads earlier stages' outputs as
files and dicts and writes Markdown lines and PNGs (drawn by :mod:`workbench.plots`).

The ``report`` stages (:mod:`workbench.stages.report.run`, ``report_nli``, ``report_bench``, and the ``report_bench_*``
stages beside their benchmarks: features, decoding, served, runtime) call these writers; a report writer never
imports a stage, so it sits below them (layer 5 of docs/architecture.md).
"""
