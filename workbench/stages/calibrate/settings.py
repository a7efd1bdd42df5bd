"""The 'calibrate' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView
from workbench.stages.settings.shared import check_split


@dataclass
class CalibrateSection:
    """The 'calibrate' stage: one calibrator per feature, fitted on the collected calibration split."""

    kind: Literal["auto", "isotonic", "centered_isotonic", "platt", "beta"] = doc(
        "calibrator: auto (per feature, the candidate with the lowest out-of-fold log loss on fit_split that keeps the "
        "raw score's ranking), or one kind for every feature: isotonic regression, centered isotonic regression, "
        "Platt's sigmoid, or beta calibration (Kull et al. 2017; a feature outside [0, 1] squashed by a logistic "
        "first)",
        "auto",
    )
    candidates: list[Literal["isotonic", "centered_isotonic", "platt", "beta"]] = doc(
        "the kinds auto chooses among", ["isotonic", "centered_isotonic", "platt", "beta"]
    )
    rank_tolerance: float = doc(
        "a calibrator keeps the raw ranking when it is strictly increasing or its out-of-fold AUROC is at most this "
        "far below the raw score's; auto prefers one that keeps it, and the report flags one that does not",
        0.01,
    )
    features: list[str] | None = doc("features to calibrate (null: every collected feature)", None)
    label: str = doc("the collected label to calibrate for (closed-book correctness)", "correct_contains")
    label_threshold: float = doc("a row is positive when label >= this (for graded labels such as correct_f1)", 0.5)
    fit_split: str = doc("split the calibrators are fitted on (out of fold on that split itself)", "calib")
    folds: int = doc("folds of the out-of-fold calibration on fit_split", 5, minimum=2)
    nan_policy: Literal["impute", "drop"] = doc(
        "NaN / inf feature values: impute (NaN: the fit split's median, ±inf: the end of its finite range), or drop "
        "the question (counted; evaluate and the runtime cannot drop one and still impute it, so under drop the fit "
        "never saw an imputed row)",
        "impute",
    )
    ood_fpr: float = doc(
        "the OOD flag's target false-positive rate: the share of held-out in-distribution questions it may flag "
        "(docs/ood.md)",
        0.05,
    )
    ood_split: str | None = doc(
        "in-distribution split whose questions set the OOD threshold: never the fit split, evaluate's or transfer's "
        "(null: the fit split's questions cross-fitted, each against the others)",
        "val",
    )
    ood_neighbours: int = doc("fit-split questions whose mean embedding distance is a question's novelty", 10)
    ood_limit: int | None = doc(
        "questions read per split for the OOD flag: the fit split's reference, the threshold split and each measured "
        "split (null: all; MiniLM embeds ~50 wiki-qa questions a second on 2 cores, each once: they are cached)",
        500,
    )


def check(config: RecipeView) -> None:
    """calibrate's load check: the label and the features it reads are collected, the calibrator candidates are
    distinct and the ranking tolerance is in [0, 1] (its fit split among the collected splits is an agreement,
    :data:`workbench.stages.agreements.AGREEMENTS`)."""
    from workbench.stages.collect.run import LABELS, labels_for

    section, collect = config.calibrate, config.collect
    collected = labels_for(list(collect.labels))
    if section.label not in collected:
        need = LABELS.get(section.label, {}).get("needs")
        hint = f"add {need} to collect.labels" if need else f"collected labels: {', '.join(collected)}"
        raise ConfigError(f"label {section.label!r} is not collected ({hint})", "calibrate.label")
    missing = [f for f in section.features or [] if f not in collect.features]
    if missing or section.features == []:
        raise ConfigError(f"{missing or 'no features'}: give features of collect.features", "calibrate.features")
    if not section.candidates or len(set(section.candidates)) != len(section.candidates):
        raise ConfigError("name at least one calibrator kind, each once", "calibrate.candidates")
    if not 0.0 <= section.rank_tolerance <= 1.0:
        raise ConfigError(f"must be in [0, 1], got {section.rank_tolerance}", "calibrate.rank_tolerance")
    check_ood(config)


def check_ood(config: RecipeView) -> None:
    """The OOD flag's settings: a target rate in (0, 1), and a threshold split that the dataset has, that gets
    questions and that is in distribution (not wiki-qa's held-out topics). That it is neither the fit split nor a
    split evaluate or transfer reports is declared in :data:`workbench.stages.agreements.AGREEMENTS`."""
    from workbench.calibration.ood import min_questions
    from workbench.data.article_splits import OOD_SPLIT

    section = config.calibrate
    if not 0.0 < section.ood_fpr < 1.0:
        raise ConfigError(f"must be in (0, 1), got {section.ood_fpr}", "calibrate.ood_fpr")
    limit = section.ood_limit
    if limit is not None and section.ood_neighbours >= limit:
        raise ConfigError(f"must be below calibrate.ood_limit ({limit})", "calibrate.ood_neighbours")
    need = min_questions(section.ood_fpr)
    if limit is not None and limit < need:
        raise ConfigError(
            f"{limit} questions cannot set a threshold for calibrate.ood_fpr {section.ood_fpr} (needs {need})",
            "calibrate.ood_limit",
        )
    if section.ood_split is None:
        return
    if config.data.dataset == "wiki-qa" and section.ood_split == OOD_SPLIT:
        raise ConfigError(
            "the held-out topics are the shift the flag is measured on, not in-distribution questions",
            "calibrate.ood_split",
        )
    try:
        check_split(config, "calibrate", "calibrate.ood_split", section.ood_split)
    except ConfigError as exc:
        raise ConfigError(f"{exc.what}; null cross-fits the fit split instead", "calibrate.ood_split") from None
