"""Benchmark ``bench_gpu``: collection, serve-model and contrastive-decoding throughput and peak memory on a CUDA GPU.

Its stages' specs; the run code (:mod:`workbench.bench.gpu.run`) is imported only when a stage runs."""

from __future__ import annotations

from workbench.bench.gpu.settings import BenchGpuSection, check
from workbench.bench.registry import report_spec
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "bench_gpu",
        "measure collection, serve-model and contrastive-decoding throughput and peak memory on a CUDA GPU "
        "(random-weight SmolLM2 / 1B shapes); skips without CUDA",
        f"{__name__}.run:run",
        resources=("generator", "embedder", "retriever"),
        # generator: the tokenizer and the pairs' prompts; embedder, nli: the collection's judge; retrieval: pairs
        sections=("bench_gpu", "generator", "embedder", "nli", "retrieval"),
        inputs=("build_data",),
        uses=("generator", "embedder"),
        settings=BenchGpuSection,
        check=check,
        splits=("bench_gpu.split",),
    ),
    report_spec(
        __name__, "report_bench_gpu", "write the GPU benchmark report (or say that it skipped, and where)", "bench_gpu"
    ),
)
