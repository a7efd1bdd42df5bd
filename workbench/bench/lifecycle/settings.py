"""The 'lifecycle' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView

OOD_SHIFT = "ood"
"""The shift of the run's held-out-topic split (``data.ood_topics``); any other shift names a wiki-qa template."""


@dataclass
class LifecycleSection:
    """The 'lifecycle' stage: a shipped bundle's life after export — score its traffic, watch drift on a shifted
    stream, recalibrate on the shifted stream's feedback, compare before / after (docs/monitoring.md)."""

    run: str = doc(
        "a finished run (build_data; its bundle is exported from it when 'bundle' is null)", "artifacts/runs/quickstart"
    )
    bundle: str | None = doc("the bundle version directory to follow (null: export the run now)", None)
    runtime: dict[str, Any] = doc(
        "runtime overrides the bundle is loaded with (docs/bundles.md), e.g. {batch_size: 8}", {}
    )
    in_distribution: int = doc("first test-split questions answered closed-book and scored: the deployment traffic", 64)
    shifts: list[str] = doc(
        "the shifted streams: 'ood' (the run's held-out-topic split) and / or open-answer wiki-qa templates asked "
        "about the run's test articles (cloze, description, two_hop: another task)",
        ["ood", "cloze"],
    )
    shift_limit: int = doc(
        "questions of the feedback shift (answered closed-book and with retrieval: its labels are the feedback)", 160
    )
    drift_limit: int = doc(
        "questions of every other shift (answered closed-book: they are streamed for drift only)", 64
    )
    feedback_shift: str = doc("the shift whose labelled answers are the simulated feedback recalibrated on", "ood")
    holdout: float = doc("fraction of the feedback held out to compare before / after (recalibrate --holdout)", 0.3)
    force: bool = doc("write the recalibrated version even when it is not better (recalibrate --force)", False)
    refit: list[str] = doc(
        "what recalibrate refits beside the calibrators (recalibrate --refit): tau re-chooses τ with the bundle's "
        "own rule on the feedback (its answers with retrieval are labelled, so max_routed_score can), router "
        "refits the classifier",
        ["tau"],
    )
    tau_rule: str | None = doc(
        "the threshold rule τ is re-chosen by (recalibrate --tau-rule): max_f1 | target_rate | max_routed_score; null: "
        "the bundle's own (refused when a router pick or a study set τ: they have no threshold rule to re-run)",
        None,
    )
    window: int | None = doc("answers per drift window (null: the bundle's drift.window)", None)
    min_count: int | None = doc(
        "answers a series needs in the window to alarm (null: the bundle's drift.min_count)", None
    )


def check(config: RecipeView) -> None:
    """lifecycle's load check: positive sizes, a held-out fraction in (0, 1), the feedback shift among the shifts,
    known templates, a window that can hold min_count answers."""
    from workbench.data.wikiqa import TEMPLATES

    section = config.lifecycle
    for key in ("in_distribution", "shift_limit", "drift_limit"):
        if getattr(section, key) < 1:
            raise ConfigError(f"must be >= 1, got {getattr(section, key)}", f"lifecycle.{key}")
    if not section.shifts or len(set(section.shifts)) != len(section.shifts):
        raise ConfigError("name one or more distinct shifts", "lifecycle.shifts")
    unknown = [s for s in section.shifts if s != OOD_SHIFT and s not in TEMPLATES]
    if unknown:
        raise ConfigError(
            f"unknown shift(s) {unknown}: 'ood' or a template ({', '.join(TEMPLATES)})", "lifecycle.shifts"
        )
    if section.feedback_shift not in section.shifts:
        raise ConfigError(f"must be one of lifecycle.shifts {section.shifts}", "lifecycle.feedback_shift")
    if not 0.0 < section.holdout < 1.0:
        raise ConfigError(f"must be in (0, 1), got {section.holdout}", "lifecycle.holdout")
    bad = [r for r in section.refit if r not in ("tau", "router")]
    if bad or len(set(section.refit)) != len(section.refit):
        raise ConfigError(f"name distinct parts among tau, router; got {section.refit}", "lifecycle.refit")
    if section.tau_rule is not None and section.tau_rule not in ("max_f1", "target_rate", "max_routed_score"):
        raise ConfigError(
            f"must be max_f1, target_rate or max_routed_score (or null), got {section.tau_rule!r}", "lifecycle.tau_rule"
        )
    if section.tau_rule is not None and "tau" not in section.refit:
        raise ConfigError("re-chooses τ: add tau to lifecycle.refit", "lifecycle.tau_rule")
    if section.window is not None and section.window < 10:
        raise ConfigError(f"must be >= 10 (or null), got {section.window}", "lifecycle.window")
    if section.min_count is not None and (
        section.min_count < 1 or (section.window and section.min_count > section.window)
    ):
        raise ConfigError("must be in [1, lifecycle.window] (or null)", "lifecycle.min_count")
