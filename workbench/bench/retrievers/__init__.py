"""Benchmark ``bench_retrievers``: the retrieval backends over one passage corpus, measured in one run on one machine.

Its stages' specs; the run code (:mod:`workbench.bench.retrievers.run`) is imported only when a stage runs."""

from __future__ import annotations

from workbench.bench.registry import report_spec
from workbench.bench.retrievers.settings import BenchRetrieversSection, check
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "bench_retrievers",
        "measure the retrieval backends over one corpus: indexing docs/s, query latency at each concurrency, "
        "memory, disk, top-k agreement with bm25s; a dense scale tier of synthetic vectors",
        f"{__name__}.run:run",
        sections=("bench_retrievers", "data"),
        inputs=("build_data",),
        cacheable=False,
        settings=BenchRetrieversSection,
        check=check,
    ),
    report_spec(
        __name__, "report_bench_retrievers", "write the retrieval-backends benchmark report", "bench_retrievers"
    ),
)
