"""Benchmark ``bench_runtime``: what a deployed bundle costs and whether it decides as its run did.

Its stages' specs; the run code (:mod:`workbench.bench.runtime.run`) is imported only when a stage runs."""

from __future__ import annotations

from workbench.bench.registry import report_spec
from workbench.bench.runtime.settings import BenchRuntimeSection, check
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "bench_runtime",
        "measure a bundle: cold start, decision-path latency, parity with its run, serve under load",
        f"{__name__}.run:run",
        sections=("bench_runtime", "export"),
        cacheable=False,
        settings=BenchRuntimeSection,
        check=check,
    ),
    report_spec(__name__, "report_bench_runtime", "write the runtime benchmark report", "bench_runtime"),
)
