"""Benchmark ``bench_features``: the cost of the uncertainty features, shared stats graph vs one feature at a time vs
bare generation.

Its stages' specs; the run code (:mod:`workbench.bench.features.run`) is imported only when a stage runs."""

from __future__ import annotations

from workbench.bench.features.settings import BenchFeaturesSection, check
from workbench.bench.registry import report_spec
from workbench.stages.spec import StageSpec

SPECS: tuple[StageSpec, ...] = (
    StageSpec(
        "bench_features",
        "measure the cost of the 18 features: shared stats graph vs one feature at a time vs bare generation",
        f"{__name__}.run:run",
        resources=("generator", "embedder"),
        sections=("bench_features", "generator", "embedder", "nli"),
        inputs=("build_data",),
        version=2,
        uses=("generator", "embedder"),
        settings=BenchFeaturesSection,
        check=check,
        splits=("bench_features.split",),
    ),
    report_spec(__name__, "report_bench_features", "write the feature-cost benchmark report", "bench_features"),
)
