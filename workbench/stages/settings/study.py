"""The 'study' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView


@dataclass
class StudySection:
    """The 'study' stage: Optuna studies of the methods' thresholds and decoding coefficients (docs/studies.md)."""

    methods: list[str] = doc("methods to tune (dtr, d2rag, dense_rag, insemrag)", ["dtr", "d2rag"])
    space: dict[str, dict] = doc(
        "per method {parameter: {low, high[, log][, int]} | {choices: [...]} | {breakpoints: true}}; a method not "
        "named gets its default space (dtr: tau on a log scale; d2rag: tau, alpha_pos, alpha_neg; dense_rag: theta "
        "over its DSE breakpoints)",
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
    """study's load check: tunable methods with valid spaces and options, known constraint metrics, D²-RAG's learned
    parts and its gold-free utility, then :func:`check_d2rag_replay` and :func:`check_keep_threshold`."""
    from workbench.methods.registry import INSEMRAG_METHODS, check_options
    from workbench.stages.settings.evaluate import check_distilled_controller
    from workbench.tuning.space import parse_spaces
    from workbench.tuning.study import CONSTRAINT_METRICS

    section = config.study
    hint = "the study does not read the distill stage"
    check_distilled_controller(config, [(m, hint) for m in section.methods if m in INSEMRAG_METHODS])
    if not section.methods:
        raise ConfigError("name at least one method to tune", "study.methods")
    if len(set(section.methods)) != len(section.methods):
        raise ConfigError(f"a method is listed twice: {section.methods}", "study.methods")
    parse_spaces(list(section.methods), dict(section.space), "study.space")
    options = {m: config.evaluate.options.get(m, {}) for m in section.methods}
    check_options(list(section.methods), options)
    for name, limit in section.constraints.items():
        if name not in CONSTRAINT_METRICS:
            raise ConfigError(
                f"constraint on unknown metric {name!r} (known: {', '.join(CONSTRAINT_METRICS)})", "study.constraints"
            )
        if isinstance(limit, bool) or not isinstance(limit, int | float) or limit < 0:
            raise ConfigError(f"the limit of {name} must be a number >= 0, got {limit!r}", "study.constraints")
    if section.token_budget is not None and not section.multi_objective:
        raise ConfigError("token_budget picks from a Pareto front: set multi_objective: true", "study.token_budget")
    if "d2rag" in section.methods:
        missing = [s for s in ("collect", "calibrate", "classify") if s not in config.stages]
        if missing:
            raise ConfigError(f"tuning d2rag needs the stages {', '.join(missing)} before study", "study.methods")
    check_utility(config)
    check_d2rag_replay(config)
    check_keep_threshold(config)


def check_utility(config: RecipeView) -> None:
    """study ← fit_utility: D²-RAG is tuned with the gold-free utility its bundle runs, never with the gold-using
    oracle (so fit_utility must run before the study), and its space holds no parameter that utility makes inert."""
    from workbench.stages.settings.fit_utility import INERT_UNDER_CLASSIFIER, classifier_utility

    section = config.study
    if "d2rag" not in section.methods:
        return
    if "fit_utility" not in config.stages:  # listed after the study: the stage list's own check refuses it
        raise ConfigError(
            "tuning d2rag needs the fit_utility stage before study: without a fitted utility its trials would decode "
            "with the gold-using oracle, which no bundle runs",
            "study.methods",
        )
    space = section.space.get("d2rag") or {}
    inert = [name for name in INERT_UNDER_CLASSIFIER if name in space]
    if inert and classifier_utility(config):
        raise ConfigError(
            f"{inert[0]} changes nothing with fit_utility.model: classifier (the classifier decides the class; its "
            "labels were cut at fit_utility.tau_pos / tau_neg): drop it from the space, or use model: ridge",
            f"study.space.d2rag.{inert[0]}",
        )


def check_d2rag_replay(config: RecipeView) -> None:
    """study ← collect: D²-RAG's τ trials replay one always-retrieve run, answering a question that does not retrieve
    with a_para, made at collect's stats budget; that is D²-RAG's own answer only when the budgets are equal."""
    from workbench.stages.settings.evaluate import d2rag_setting
    from workbench.tuning.space import DEFAULT_SPACES

    section = config.study
    if "d2rag" not in section.methods or "collect" not in config.stages:
        return
    space = section.space.get("d2rag") or DEFAULT_SPACES["d2rag"]
    answer = d2rag_setting(config, "max_new_tokens") or config.evaluate.max_new_tokens
    if "tau" in space and config.collect.max_new_tokens != answer:
        raise ConfigError(
            f"tuning d2rag's tau replays its closed-book answers made at collect.max_new_tokens = "
            f"{config.collect.max_new_tokens}, but it answers with {answer} tokens (evaluate.options.d2rag."
            "max_new_tokens, else evaluate.max_new_tokens): make them equal, or leave tau out of study.space.d2rag",
            "collect.max_new_tokens",
        )


def check_keep_threshold(config: RecipeView) -> None:
    """study: InSemRAG's keep_threshold filters an LM controller's relevance scores; the heuristic controller has none,
    so tuning it there would tune nothing."""
    from workbench.methods.registry import METHOD_TABLE

    space = config.study.space.get("insemrag") or {}
    if "insemrag" not in config.study.methods or "keep_threshold" not in space:
        return
    options = config.evaluate.options.get("insemrag") or {}
    default = METHOD_TABLE["insemrag"].defaults.get("controller", "prompted")
    controller = options.get("controller", default) if isinstance(options, dict) else default
    if controller == "heuristic":
        raise ConfigError(
            "keep_threshold changes nothing under controller: heuristic (it keeps any candidate sharing a keyword "
            "with the query; keep_threshold filters an LM controller's p(Yes)): drop it from the space, or tune a "
            "prompted or distilled controller",
            "study.space.insemrag.keep_threshold",
        )
