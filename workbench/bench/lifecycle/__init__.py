"""Benchmark ``lifecycle``: a shipped bundle after export — its traffic scored, drift watched on a real shift,
recalibrated on simulated feedback, calibration compared before / after (issue 45; docs/monitoring.md).

Its stages' specs; the run code (:mod:`workbench.bench.lifecycle.run`) is imported only when a stage runs."""

from __future__ import annotations

from workbench.bench.lifecycle.settings import LifecycleSection, check
from workbench.bench.registry import report_spec
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "bench_lifecycle",
        "follow a bundle after export: score traffic, drift on a shift, recalibrate on feedback, before / after",
        f"{__name__}.run:run",
        sections=("lifecycle", "export"),
        cacheable=False,
        settings=LifecycleSection,
        section="lifecycle",
        check=check,
    ),
    report_spec(__name__, "report_bench_lifecycle", "write the lifecycle report", "bench_lifecycle"),
)
