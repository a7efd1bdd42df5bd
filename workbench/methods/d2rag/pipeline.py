"""D²-RAG's part in the pipeline's checks and in the study: what the recipe must hold for it to be studied, exported
or given a parameters file, and how its study's utility is recorded. The stages call these through the spec's
:class:`~workbench.methods.spec.MethodHooks`; nothing here imports a stage (``config`` is the recipe view)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.core.errors import ConfigError

__all__ = [
    "INERT_UNDER_CLASSIFIER",
    "check_params",
    "check_study",
    "check_study_space",
    "classifier_utility",
    "tuned_gold_free",
    "utility_record",
]

INERT_UNDER_CLASSIFIER = ("tau_pos", "tau_neg")
"""D²-RAG options a utility classifier makes inert: it decides the class itself (its labels were cut at
``fit_utility.tau_pos`` / ``tau_neg``), so D²-RAG cuts no δ with them."""

_NO_ORACLE = (
    "tuning d2rag needs the fit_utility stage before study: without a fitted utility its trials would decode with the "
    "gold-using oracle, which no bundle runs"
)


def classifier_utility(config: Any) -> bool:
    """The run fits a utility classifier (``fit_utility.model: classifier``)."""
    return "fit_utility" in config.stages and config.fit_utility.model == "classifier"


def tuned_gold_free(record: dict[str, Any], key: str = "utility") -> bool:
    """Whether a D²-RAG parameters record (``params/d2rag.json``; ``best_params.json`` with ``key="d2rag_utility"``)
    says its utility was gold-free. A record that does not say (a study made before it was recorded) is not."""
    utility = record.get(key)
    return isinstance(utility, dict) and utility.get("requires_gold") is False


def utility_record(learned: Any) -> dict[str, Any]:
    """How D²-RAG's utility was made in a study (what its parameters file and ``best_params.json`` record): the run's
    fitted predictor (``kind: learned``, its ``model`` kind, gold-free); ConfigError without one — a study never
    tunes D²-RAG with the gold-using oracle, which no bundle runs."""
    utility = getattr(learned, "utility", None)
    if utility is None:
        raise ConfigError(_NO_ORACLE, "study.methods")
    gold = bool(getattr(utility, "requires_gold", True))
    return {"kind": "learned", "model": str(utility.kind), "requires_gold": gold}


def check_study_space(names: Sequence[str], prepared: dict[str, Any] | None) -> None:
    """The study's space (parameter ``names``) holds no parameter the run's utility makes inert (``prepared``: what
    :func:`utility_record` said)."""
    if prepared is None or prepared.get("model") != "logistic_utility":
        return
    inert = [name for name in names if name in INERT_UNDER_CLASSIFIER]
    if inert:  # the classifier decides the class: D²-RAG cuts no δ with them
        raise ConfigError(
            f"{inert[0]} changes nothing with a utility classifier: drop it from the space",
            f"study.space.d2rag.{inert[0]}",
        )


def check_study(config: Any, space: dict[str, Any]) -> None:
    """study's load check for D²-RAG (``space``: its search space, the recipe's or the default): its learned parts'
    stages before the study; the gold-free utility its bundle runs, never the oracle (so fit_utility before the study)
    and no parameter that utility makes inert; its τ replay's closed-book answers made at its own answer budget."""
    missing = [s for s in ("collect", "calibrate", "classify") if s not in config.stages]
    if missing:
        raise ConfigError(f"tuning d2rag needs the stages {', '.join(missing)} before study", "study.methods")
    if "fit_utility" not in config.stages:  # listed after the study: the stage list's own check refuses it
        raise ConfigError(_NO_ORACLE, "study.methods")
    given = config.study.space.get("d2rag") or {}
    inert = [name for name in INERT_UNDER_CLASSIFIER if name in given]
    if inert and classifier_utility(config):
        raise ConfigError(
            f"{inert[0]} changes nothing with fit_utility.model: classifier (the classifier decides the class; its "
            "labels were cut at fit_utility.tau_pos / tau_neg): drop it from the space, or use model: ridge",
            f"study.space.d2rag.{inert[0]}",
        )
    # τ trials replay one always-retrieve run, answering a question that does not retrieve with a_para, made at
    # collect's stats budget: D²-RAG's own answer only when the budgets are equal
    options = config.evaluate.options.get("d2rag") or {}
    answer = (options.get("max_new_tokens") if isinstance(options, dict) else None) or config.evaluate.max_new_tokens
    if "tau" in space and config.collect.max_new_tokens != answer:
        raise ConfigError(
            f"tuning d2rag's tau replays its closed-book answers made at collect.max_new_tokens = "
            f"{config.collect.max_new_tokens}, but it answers with {answer} tokens (evaluate.options.d2rag."
            "max_new_tokens, else evaluate.max_new_tokens): make them equal, or leave tau out of study.space.d2rag",
            "collect.max_new_tokens",
        )


def check_params(config: Any, path: str, params: dict[str, Any], exported: bool) -> None:
    """evaluate.params → evaluate / export: a D²-RAG parameters file that goes into a bundle (``exported``) was tuned
    with a gold-free utility (its study recorded how the utility was made), and sets no option the run's utility
    classifier makes inert."""
    if exported and not tuned_gold_free(params):
        raise ConfigError(
            f"{path}: d2rag's parameters were tuned with the gold-using oracle utility (or the file does not say "
            "how its utility was made), and a bundle runs the gold-free one: rerun the study with fit_utility",
            "evaluate.params",
        )
    inert = [name for name in INERT_UNDER_CLASSIFIER if name in params["options"]]
    if inert and classifier_utility(config):
        raise ConfigError(
            f"{path} sets d2rag's {inert[0]}, which changes nothing with fit_utility.model: classifier (the "
            "classifier decides the class): drop it from the file",
            "evaluate.params",
        )
