"""The 'study' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView
from workbench.stages.evaluate.settings import check_distilled_controller


@dataclass
class StudySection:
    """The 'study' stage: Optuna studies of the methods' thresholds and decoding coefficients (docs/studies.md)."""

    methods: list[str] = doc("methods to tune: any with a study space (docs/studies.md)", ["dtr", "d2rag"])
    space: dict[str, dict] = doc(
        "per method {parameter: {low, high[, log][, int]} | {choices: [...]} | {breakpoints: true}}; a method not "
        "named gets its method's default space (docs/studies.md lists them)",
        {},
    )
    split: str = doc("split every trial is scored on", "val")
    test_split: str = doc("split the chosen and the default parameters are scored on once, after the study", "test")
    limit: int | None = doc("first N questions of each of the two splits (null: all)", 40)
    n_trials: int = doc("complete trials per method (workers joining one study share them)", 30)
    objective: Literal["em", "f1", "contains"] = doc("quality metric to maximise", "contains")
    multi_objective: bool = doc("also minimise tokens per question (NSGA-II; the Pareto front is reported)", False)
    constraints: dict[str, float] = doc(
        "upper limits on per-question means: retrieval_rate, tokens, latency, lm_calls, nli_pairs", {}
    )
    token_budget: float | None = doc(
        "multi_objective: pick the best quality within this many tokens per question", None
    )
    sampler: Literal["auto", "tpe", "nsga2", "random"] = doc(
        "Optuna sampler (auto: TPE, NSGA-II if multi-objective)", "auto"
    )
    storage: str | None = doc(
        "Optuna storage: null = a SQLite file in the run directory; journal:PATH = a journal file (workers sharing a "
        "disk); or an RDB URL (postgresql://..., mysql+pymysql://..., sqlite:///...)",
        None,
    )
    study_name: str = doc(
        "study name prefix ('{name}': the recipe name); one study per method: <prefix>-<method>", "{name}"
    )
    batch_questions: int = doc("questions handed to a method at once", 8)
    ship_tau: bool = doc(
        "whether the study's D²-RAG τ replaces the one classify chose (evaluate, export); even then only when the "
        "study separates its trials — at most half tie with the chosen one and it beats classify's τ on the study "
        "split (docs/studies.md)",
        False,
    )


def check(config: RecipeView) -> None:
    """study's load check: tunable methods with valid spaces and options, known constraint metrics, then each studied
    method's own check (its spec's ``hooks.check_study``: D²-RAG's learned parts, gold-free utility and τ replay
    budget; InSemRAG's keep_threshold only with an LM controller)."""
    from workbench.methods.registry import INSEMRAG_METHODS, check_method_names, method_spec
    from workbench.tuning.space import default_spaces, parse_spaces
    from workbench.tuning.study import CONSTRAINT_METRICS

    section = config.study
    hint = "the study does not read the distill stage"
    check_distilled_controller(config, [(m, hint) for m in section.methods if m in INSEMRAG_METHODS])
    if not section.methods:
        raise ConfigError("name at least one method to tune", "study.methods")
    if len(set(section.methods)) != len(section.methods):
        raise ConfigError(f"a method is listed twice: {section.methods}", "study.methods")
    parse_spaces(list(section.methods), dict(section.space), "study.space")
    check_method_names(list(section.methods), {})
    for method in section.methods:  # its evaluate.options, configured once (the study's trials start from them)
        config.evaluate.method_config(method)
    for name, limit in section.constraints.items():
        if name not in CONSTRAINT_METRICS:
            raise ConfigError(
                f"constraint on unknown metric {name!r} (known: {', '.join(CONSTRAINT_METRICS)})", "study.constraints"
            )
        if isinstance(limit, bool) or not isinstance(limit, int | float) or limit < 0:
            raise ConfigError(f"the limit of {name} must be a number >= 0, got {limit!r}", "study.constraints")
    if section.token_budget is not None and not section.multi_objective:
        raise ConfigError("token_budget picks from a Pareto front: set multi_objective: true", "study.token_budget")
    defaults = default_spaces()
    for method in section.methods:
        hook = method_spec(method, "study.methods").hooks.check_study
        if hook is not None:
            hook(config, section.space.get(method) or defaults.get(method, {}))
