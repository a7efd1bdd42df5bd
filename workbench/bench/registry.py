"""The benchmark table: the benchmark packages, whose stages the recipe loader and the stage runner take beside the
pipeline stages (:data:`workbench.stages.registry.STAGES`)."""

from __future__ import annotations

from workbench.stages.spec import StageSpec, gather_specs

BENCHMARKS: tuple[str, ...] = (
    "backends",
    "features",
    "decoding",
    "served",
    "retrievers",
    "runtime",
    "gpu",
    "lifecycle",
)
"""The benchmark packages below ``workbench.bench``, each holding ``SPECS`` (its measuring and report stages)."""


def benchmark_specs() -> dict[str, StageSpec]:
    """Every benchmark stage's spec by name, in :data:`BENCHMARKS` order (imports no run code)."""
    return gather_specs(tuple(f"workbench.bench.{name}" for name in BENCHMARKS))


def report_spec(package: str, name: str, summary: str, measured: str) -> StageSpec:
    """The spec of a benchmark's report stage ``name``: ``report`` of ``<package>.run`` fills the report directory from
    stage ``measured``'s ``bench.json`` (:func:`workbench.bench.report.write_bench_report`); never cached, as its
    output lies outside the run directory."""
    return StageSpec(name, summary, f"{package}.run:report", sections=("report",), inputs=(measured,), cacheable=False)
