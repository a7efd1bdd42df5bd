"""Benchmark ``bench_backends``: generator, NLI and retrieval speed and quality, compared by ratios in one run.

Its stages' specs; the run code (:mod:`workbench.bench.backends.run`) is imported only when a stage runs."""

from __future__ import annotations

from workbench.bench.backends.settings import BenchSection, check
from workbench.bench.registry import report_spec
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "bench_backends",
        "measure generator (shared prefill vs re-encoding), NLI and retrieval speed and quality",
        f"{__name__}.run:run",
        resources=("generator", "embedder", "retriever"),
        sections=("bench", "generator", "embedder", "nli", "retrieval"),
        inputs=("build_data",),
        uses=("generator", "embedder"),
        settings=BenchSection,
        section="bench",
        check=check,
    ),
    report_spec(__name__, "report_bench", "write the backends benchmark report", "bench_backends"),
)
