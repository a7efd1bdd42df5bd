"""The stage table: what each stage is called, what it reads, which config sections its output depends on.

One table for the recipe loader and the runner: the pipeline stages (:data:`PIPELINE`) and the benchmark stages
(:func:`workbench.bench.registry.benchmark_specs`). What a row holds: :class:`~workbench.stages.spec.StageSpec`."""

from __future__ import annotations

from workbench.bench.registry import benchmark_specs
from workbench.core.errors import ConfigError
from workbench.stages.spec import StageSpec, gather_specs

__all__ = ["PIPELINE", "STAGES", "STAGE_PACKAGES", "StageSpec", "validate_stage_list"]


STAGE_PACKAGES: tuple[str, ...] = (
    "build_data",
    "answer",
    "report",
    "train_nli",
    "report_nli",
    "collect",
    "calibrate",
    "classify",
    "evaluate",
    "seper_eval",
    "fit_utility",
    "distill_data",
    "distill",
    "tune_reader",
    "study",
    "export",
    "transfer",
)
"""The pipeline stages, each a package (``workbench/stages/<name>/``: its spec in ``__init__.py``, ``settings.py``,
``run.py``), in the order ``workbench stages`` lists them. Adding a stage is adding its package and its name here."""

PIPELINE: dict[str, StageSpec] = gather_specs(tuple(f"workbench.stages.{name}" for name in STAGE_PACKAGES))
"""The pipeline stages, in the order ``workbench stages`` lists them."""

STAGES: dict[str, StageSpec] = {**PIPELINE, **benchmark_specs()}
"""Every stage a recipe may name: the pipeline's, then the benchmarks' (:data:`workbench.bench.registry.BENCHMARKS`)."""


def validate_stage_list(stages: list[str], where: str) -> None:
    """Check that every stage exists, none repeats, and each stage's inputs run before it."""
    if not stages:
        raise ConfigError("'stages' is empty: name at least one stage", where)
    seen: set[str] = set()
    for name in stages:
        if name not in STAGES:
            raise ConfigError(f"unknown stage '{name}' (known: {', '.join(STAGES)})", where)
        if name in seen:
            raise ConfigError(f"stage '{name}' is listed twice", where)
        missing = [dep for dep in STAGES[name].inputs if dep not in seen]
        if missing:
            raise ConfigError(f"stage '{name}' needs {', '.join(missing)} to run before it", where)
        late = [dep for dep in STAGES[name].optional_inputs if dep in stages and dep not in seen]
        if late:
            raise ConfigError(f"stage '{name}' reads {', '.join(late)}: list it before '{name}'", where)
        seen.add(name)
