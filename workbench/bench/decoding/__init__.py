"""Benchmark ``bench_decoding``: contrastive decoding (one batched forward per step) vs greedy vs two sequential
decoders.

Its stages' specs; the run code (:mod:`workbench.bench.decoding.run`) is imported only when a stage runs."""

from __future__ import annotations

from workbench.bench.decoding.settings import BenchDecodingSection, check
from workbench.bench.registry import report_spec
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "bench_decoding",
        "measure contrastive decoding (one batched forward per step) vs greedy vs two sequential decoders",
        f"{__name__}.run:run",
        resources=("generator", "embedder", "retriever"),
        sections=("bench_decoding", "generator", "embedder", "retrieval"),
        inputs=("build_data",),
        uses=("generator", "embedder"),
        settings=BenchDecodingSection,
        check=check,
        splits=("bench_decoding.split",),
        report=f"{__name__}.report:section",
    ),
    report_spec(__name__, "report_bench_decoding", "write the contrastive-decoding benchmark report", "bench_decoding"),
)
