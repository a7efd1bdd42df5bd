"""D²-RAG (spec ``seed-003-d2rag.md``): retrieve from calibrated uncertainty features (p = P(closed-book answer
correct), retrieve iff p < τ); decode the retrieved context by its utility (utility-aware contrastive decoding).
One job per module:

* :mod:`~workbench.methods.d2rag.settings` — :class:`D2RAGSettings`, every knob and its checks;
* :mod:`~workbench.methods.d2rag.rule` — :func:`decide`, the one retrieval rule;
* :mod:`~workbench.methods.d2rag.method` — :class:`D2RAG`, the per-question flow (imported when built).

This ``__init__`` holds the options and the specs (``d2rag`` with the learned utility, ``d2rag_oracle`` with the
paper's ΔSePer, which reads the gold answer); every public name of ``settings`` (:class:`D2RAGSettings`) and
``method`` is importable from here on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from workbench.core.bounds import SAMPLES, check_int
from workbench.core.config import doc
from workbench.core.errors import ConfigError, DataError
from workbench.methods.d2rag import pipeline
from workbench.methods.d2rag.rule import ALWAYS_RETRIEVE_TAU, decide
from workbench.methods.spec import (
    AgreementRow,
    BuildRequest,
    MethodHooks,
    MethodSpec,
    ReplayRule,
    Tunable,
    lazy_exports,
)

__all__ = ["ALWAYS_RETRIEVE_TAU", "METHODS", "UtilityOptions", "decide"]

__getattr__ = lazy_exports(__name__, "settings", "method")


@dataclass(frozen=True)
class UtilityOptions:
    """How D²-RAG's oracle utility (ΔSePer, read with the gold answer) is computed when it is used."""

    seper_samples: int = doc("answers sampled per SePer estimate", 10)
    utility_label: str = doc("the oracle utility: delta_seper_s or delta_seper_h", "delta_seper_s")

    def validate(self, given: Mapping[str, Any]) -> UtilityOptions:
        """Raise a :class:`ConfigError` naming the bad key; return ``self`` with ``utility_label`` as a string."""
        check_int(self.seper_samples, "seper_samples", "seper_samples", SAMPLES)
        label = str(self.utility_label)
        if label not in ("delta_seper_s", "delta_seper_h"):
            raise ConfigError(f"utility_label must be delta_seper_s or delta_seper_h, got {label!r}", "utility_label")
        return replace(self, utility_label=label)


def _build(req: BuildRequest) -> Any:
    from workbench.methods.d2rag.method import D2RAG
    from workbench.methods.seper.utility import NoUtility, OracleUtility
    from workbench.uncertainty.seper import SeperSettings

    learned = req.learned
    assert learned is not None  # the spec's requires, checked by build_method
    if req.utility_fallback not in ("oracle", "none"):
        raise ConfigError(f"utility_fallback must be oracle or none, got {req.utility_fallback!r}", "build_method")
    seper = SeperSettings(samples=int(req.options.seper_samples), max_new_tokens=req.tools.max_new_tokens, seed=0)
    oracle = OracleUtility(settings=seper, label=req.options.utility_label)
    if req.name == "d2rag_oracle":
        utility = oracle
    elif learned.utility is not None:
        utility = learned.utility
    else:
        utility = oracle if req.utility_fallback == "oracle" else NoUtility()
    extra: dict[str, Any] = {"features": list(learned.features)}
    if learned.stats is not None:
        extra["stats"] = learned.stats
    method = D2RAG(
        req.tools,
        utility=utility,
        settings=req.settings(**extra),
        lars_scorer=learned.lars_scorer,
        policy=learned.policy(),
        ood_profile=learned.ood,
    )
    method.name = req.name
    return method


def _read_replay(steps: dict[str, dict[str, Any]], trace: dict[str, Any]) -> tuple[float, str, bool]:
    """(P(correct), closed-book answer a_para, retrieved) from the ``features`` and ``decide`` steps of an
    always-retrieve trace; a DataError when a_para is not the answer the method returns without retrieval."""
    try:
        decision, features = steps["decide"]["detail"], steps["features"]["detail"]
        if features.get("closed_book_is_answer") is not True:
            raise DataError(
                "D²-RAG's τ replay answers a question that does not retrieve with a_para, made at collect's stats "
                "budget: that budget (collect.max_new_tokens) must equal D²-RAG's answer budget "
                "(evaluate.options.d2rag.max_new_tokens, else evaluate.max_new_tokens)",
                "replay",
            )
        if decision.get("p_correct") is None:
            raise DataError("the trace holds no P(correct): run D²-RAG with score_always at τ > 1", "replay")
        closed = features.get("closed_book_answer") or ""
        return float(decision["p_correct"]), str(closed).strip(), bool(decision["retrieve"])
    except KeyError as exc:
        raise DataError(f"trace of {trace.get('method')} lacks {exc}", "replay") from None


def _settings_class() -> type:
    # the settings read the stats settings, whose package imports numpy and the features: loaded when needed
    from workbench.methods.d2rag.settings import D2RAGSettings

    return D2RAGSettings


_HOOKS = MethodHooks(
    check_study=pipeline.check_study,
    check_params=pipeline.check_params,
    study_prepare=pipeline.utility_record,
    check_study_space=pipeline.check_study_space,
    prepared_key="utility",  # how the trials' utility was made: export refuses any but a gold-free one
)


def _report(evaluate_dir: Any) -> list[str]:
    from workbench.methods.d2rag.report import d2rag_utility_lines

    return d2rag_utility_lines(evaluate_dir)


_USES_UTILITY = "d2rag reads the fitted utility"
_CUTS = (
    "the utility classes are ΔSePer cut at tau_pos / tau_neg (the classifier learns them cut at fit_utility's, "
    "D²-RAG cuts a predicted δ at its own)"
)
_AGREEMENTS = (
    AgreementRow(
        "fit_utility.k",
        "evaluate.options.d2rag.k",
        "the utility learns on the top-k context D²-RAG retrieves",
        _USES_UTILITY,
        ("fit_utility",),
    ),
    AgreementRow(
        "fit_utility.passage_chars",
        "evaluate.passage_chars",
        "D²-RAG's context block cuts each passage at evaluate.passage_chars",
        _USES_UTILITY,
        ("fit_utility",),
    ),
    AgreementRow(
        "fit_utility.max_new_tokens",
        "evaluate.max_new_tokens",
        "D²-RAG's utility features are greedy answers generated at the answering budget evaluate.max_new_tokens "
        "(evaluate.options.d2rag.max_new_tokens sets only its final answer)",
        _USES_UTILITY,
        ("fit_utility",),
    ),
    AgreementRow("fit_utility.tau_pos", "evaluate.options.d2rag.tau_pos", _CUTS, _USES_UTILITY, ("fit_utility",)),
    AgreementRow("fit_utility.tau_neg", "evaluate.options.d2rag.tau_neg", _CUTS, _USES_UTILITY, ("fit_utility",)),
    AgreementRow(
        "fit_utility.split",
        "study.test_split",
        "D²-RAG's utility classifier is trained on it, and the study scores its chosen and default parameters there "
        "once, as held-out",
        "fit_utility runs and study tunes d2rag",
        ("fit_utility", "study"),
        uses=("study",),
        relation="differs",
        held_out=True,
    ),
)
"""The settings D²-RAG makes agree across stages (its rows of the one agreements table)."""

_COMMON: dict[str, Any] = {
    "settings": _settings_class,
    "options": UtilityOptions,
    "family": "d2rag",
    "requires": ("classifier", "tau"),
    "requires_stages": ("calibrate", "classify"),
    "deferred": ("features",),
    "needs": frozenset({"step_logits"}),  # contrastive decoding reads the per-step logits of two streams
    "decide": decide,
    "decision_settings": ("alpha_pos", "alpha_neg"),  # the contrastive α a shipped decision shows beside τ
}

METHODS = (
    MethodSpec(
        "d2rag",
        "D²-RAG: retrieve from calibrated uncertainty features; utility-aware contrastive decoding (learned utility)",
        _build,
        # τ: the decision threshold on P(correct) that classify chose otherwise; the contrastive α of both utility
        # classes (the defaults α_pos = 1, α_neg = 0.1 lie inside)
        tunable={
            "tau": Tunable("float", 0.0, ALWAYS_RETRIEVE_TAU, threshold=True),
            "tau_pos": Tunable("float", -1.0, 1.0),
            "tau_neg": Tunable("float", -1.0, 1.0),
            "alpha_pos": Tunable("float", 0.0, None),
            "alpha_neg": Tunable("float", 0.0, None),
        },
        space={
            "tau": {"low": 0.0, "high": ALWAYS_RETRIEVE_TAU},
            "alpha_pos": {"low": 0.0, "high": 2.0},
            "alpha_neg": {"low": 0.0, "high": 2.0},
        },
        # at τ > 1 D²-RAG computes P(correct) only when asked
        replay=ReplayRule(
            always=ALWAYS_RETRIEVE_TAU,
            branch_steps=("features", "decide"),
            read=_read_replay,
            always_options={"score_always": True},
        ),
        learned_params={"tau": "tau"},  # τ is the classify stage's decision threshold, a learned part
        rank=10,  # the default method of a bundle that has it
        hooks=_HOOKS,
        agreements=_AGREEMENTS,
        report=_report,
        **_COMMON,
    ),
    MethodSpec(
        "d2rag_oracle",
        "D²-RAG with the paper's ΔSePer utility (reads the gold answer)",
        _build,
        gold=True,
        gold_free_twin="d2rag",
        **_COMMON,
    ),
)
"""D²-RAG's two variants: ``d2rag`` uses the learned utility predictor (when none was fitted: ``utility_fallback``
decides); ``d2rag_oracle`` always uses the paper's ΔSePer (gold answer), for the side-by-side."""
