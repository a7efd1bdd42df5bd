"""Benchmark ``bench_served``: the same features collected in-process and through OpenAI-compatible servers.

Its stages' specs; the run code (:mod:`workbench.bench.served.run`) is imported only when a stage runs."""

from __future__ import annotations

from workbench.bench.registry import report_spec
from workbench.bench.served.settings import BenchServedSection, check
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "bench_served",
        "collect the same features in-process and through OpenAI-compatible servers: agreement and questions/s",
        f"{__name__}.run:run",
        resources=("generator", "embedder"),
        sections=("bench_served", "collect", "generator", "nli", "embedder"),
        inputs=("build_data",),
        uses=("generator", "embedder"),
        cacheable=False,
        settings=BenchServedSection,
        check=check,
    ),
    report_spec(__name__, "report_bench_served", "write the served-models benchmark report", "bench_served"),
)
