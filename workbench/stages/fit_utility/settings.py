"""The 'fit_utility' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView, check_own_section
from workbench.methods.d2rag.pipeline import INERT_UNDER_CLASSIFIER, classifier_utility

__all__ = ["INERT_UNDER_CLASSIFIER", "FitUtilitySection", "check", "classifier_utility"]


@dataclass
class FitUtilitySection:
    """The 'fit_utility' stage: D²-RAG's gold-free utility (spec §13.1), trained on ΔSePer labels of (question, top-k
    context) pairs. ``k``, ``passage_chars``, ``max_new_tokens``, ``tau_pos`` and ``tau_neg`` must equal what D²-RAG
    uses (:data:`workbench.stages.agreements.AGREEMENTS`, checked at load)."""

    split: str = doc("split the (question, context) pairs come from (needs gold answers)", "calib")
    limit: int | None = doc("first N questions of the split (null: all)", 60)
    label: Literal["delta_seper_s", "delta_seper_h"] = doc("ΔSePer variant the predictor learns", "delta_seper_s")
    model: Literal["classifier", "ridge"] = doc(
        "classifier: balanced multinomial logistic regression onto the three utility classes (relevant / neutral / "
        "noisy: the label cut at tau_pos / tau_neg), D²-RAG decodes with its class; ridge: regression onto the "
        "label, cut at D²-RAG's tau_pos / tau_neg (the earlier predictor, which rarely says noisy)",
        "classifier",
    )
    dev_fraction: float = doc(
        "classifier: share of the training pairs held out (stratified) to set its per-class decision biases "
        "(0: no biases)",
        0.25,
    )
    k: int = doc("passages per context (= evaluate.options.d2rag.k)", 5)
    passage_chars: int = doc("each passage is cut to this many characters (= evaluate.passage_chars)", 400)
    max_new_tokens: int = doc(
        "answer length cap of the features' greedy answers and the SePer samples (= evaluate.max_new_tokens, the "
        "budget D²-RAG's utility features are generated with)",
        16,
    )
    tau_pos: float = doc(
        "a pair is relevant iff its label > tau_pos: the classifier's classes (ridge: the summary's class figures); "
        "= evaluate.options.d2rag.tau_pos",
        0.12,
    )
    tau_neg: float = doc(
        "a pair is noisy iff its label < tau_neg (-1 <= tau_neg < tau_pos <= 1); = evaluate.options.d2rag.tau_neg",
        -0.10,
    )
    samples: int = doc("SePer: answers sampled per condition (the paper uses 10)", 10)
    temperature: float = doc("SePer: sampling temperature (the paper uses 1.0)", 1.0)
    l2: float = doc("L2 penalty on the standardised weights (ridge: λ; classifier: C = 1 / l2, 0 = none)", 1.0)
    folds: int = doc("cross-validation folds for the out-of-fold quality figures", 5, minimum=2)
    batch_questions: int = doc("questions per batch", 8)


def validate_section(section: Any) -> None:
    """The load check of a ``fit_utility`` section (counts, folds, l2, model, dev_fraction, -1 <= tau_neg < tau_pos
    <= 1); a one-line ConfigError naming the ``fit_utility.*`` key."""
    for key in ("k", "passage_chars", "max_new_tokens", "samples", "batch_questions"):
        value = getattr(section, key)
        if value < 1:
            raise ConfigError(f"must be >= 1, got {value}", f"fit_utility.{key}")
    if section.folds < 2:
        raise ConfigError(f"must be >= 2, got {section.folds}", "fit_utility.folds")
    if section.limit is not None and section.limit < section.folds:
        raise ConfigError(f"needs at least folds={section.folds} questions, got {section.limit}", "fit_utility.limit")
    if not math.isfinite(section.l2) or section.l2 < 0:
        raise ConfigError(f"must be a finite number >= 0, got {section.l2}", "fit_utility.l2")
    if section.model not in ("classifier", "ridge"):
        raise ConfigError(f"must be classifier or ridge, got {section.model!r}", "fit_utility.model")
    if not (math.isfinite(section.dev_fraction) and 0.0 <= section.dev_fraction < 1.0):
        raise ConfigError(f"must be in [0, 1), got {section.dev_fraction}", "fit_utility.dev_fraction")
    low, high = section.tau_neg, section.tau_pos
    if not (math.isfinite(low) and math.isfinite(high) and -1.0 <= low < high <= 1.0):
        raise ConfigError(f"need -1 <= tau_neg < tau_pos <= 1, got {low} / {high}", "fit_utility.tau_neg")


def check(config: RecipeView) -> None:
    """fit_utility's load check: :func:`validate_section` on its section (the settings it shares with D²-RAG are
    :data:`workbench.stages.agreements.AGREEMENTS`). It imports no run code, so loading a recipe stays light."""
    check_own_section("fit_utility", validate_section, config)
