"""Settings two stages must keep in agreement, declared as one table and checked by one function at recipe load.

A stage that learns or records something (``key``) and a stage that uses it (``other``) must agree on the settings
that shape it: the budget the utility features are generated with, the top-k context, the class cuts, the split a
calibrator is fitted on. Each :class:`Agreement` names both keys, how they must relate, why, and when a recipe holds
both ends; :func:`check_agreements` checks them all. A stage that reads another's output adds its pair here, not a
check of its own (docs/methods/d2rag.md). Checks that concern one stage alone are that stage's own
(:attr:`workbench.stages.registry.StageSpec.check`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal

from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView, value_at

Relation = Literal["equal", "among", "differs"]
"""How ``key``'s value must relate to ``other``'s: equal to it, one of its items (``other`` is a list), or not equal."""


@dataclass(frozen=True)
class Agreement:
    """Two settings of different stages that must agree: ``key`` (the stage that learns or records something, the
    key an error names), ``other`` (the setting of the stage that uses it; ``evaluate.options.<method>.<field>`` is
    the method's effective setting: the option when given, else the method's default), ``reason`` (why: the error
    says it), ``when`` (a name in :data:`AGREEMENT_WHEN`: the recipes that hold both ends) and ``relation``."""

    key: str
    other: str
    reason: str
    when: str
    relation: Relation = "equal"


def _d2rag_reads_utility(config: RecipeView) -> bool:
    """The run fits the utility and D²-RAG reads it: evaluated, exported or tuned in a study."""
    from workbench.stages.settings.export import exported_methods

    stages = config.stages
    return "fit_utility" in stages and (
        ("evaluate" in stages and "d2rag" in config.evaluate.methods)
        or ("export" in stages and "d2rag" in exported_methods(config))
        or ("study" in stages and "d2rag" in config.study.methods)
    )


UTILITY = "d2rag reads the fitted utility"
CALIBRATE = "calibrate runs"
TRANSFER = "transfer runs"
CALIBRATE_EVALUATE = "calibrate and evaluate run"
CALIBRATE_TRANSFER = "calibrate and transfer run"

AGREEMENT_WHEN: dict[str, Callable[[RecipeView], bool]] = {
    UTILITY: _d2rag_reads_utility,
    CALIBRATE: lambda config: "calibrate" in config.stages,
    TRANSFER: lambda config: "transfer" in config.stages,
    CALIBRATE_EVALUATE: lambda config: {"calibrate", "evaluate"} <= set(config.stages),
    CALIBRATE_TRANSFER: lambda config: {"calibrate", "transfer"} <= set(config.stages),
}
"""The conditions of :data:`AGREEMENTS`, by name: ``condition(config) -> bool``."""

_CUTS = (
    "the utility classes are ΔSePer cut at tau_pos / tau_neg (the classifier learns them cut at fit_utility's, "
    "D²-RAG cuts a predicted δ at its own)"
)

AGREEMENTS: tuple[Agreement, ...] = (
    Agreement(
        "fit_utility.k", "evaluate.options.d2rag.k", "the utility learns on the top-k context D²-RAG retrieves", UTILITY
    ),
    Agreement(
        "fit_utility.passage_chars",
        "evaluate.passage_chars",
        "D²-RAG's context block cuts each passage at evaluate.passage_chars",
        UTILITY,
    ),
    Agreement(
        "fit_utility.max_new_tokens",
        "evaluate.max_new_tokens",
        "D²-RAG's utility features are greedy answers generated at the answering budget evaluate.max_new_tokens "
        "(evaluate.options.d2rag.max_new_tokens sets only its final answer)",
        UTILITY,
    ),
    Agreement("fit_utility.tau_pos", "evaluate.options.d2rag.tau_pos", _CUTS, UTILITY),
    Agreement("fit_utility.tau_neg", "evaluate.options.d2rag.tau_neg", _CUTS, UTILITY),
    Agreement(
        "calibrate.fit_split",
        "collect.splits",
        "the calibrators are fitted on collected rows",
        CALIBRATE,
        "among",
    ),
    Agreement(
        "transfer.split",
        "collect.splits",
        "its collected rows are the in-distribution condition",
        TRANSFER,
        "among",
    ),
    Agreement(
        "transfer.split",
        "calibrate.fit_split",
        "in-distribution figures on the calibrators' fit split would be in-sample",
        TRANSFER,
        "differs",
    ),
    Agreement(
        "calibrate.ood_split",
        "calibrate.fit_split",
        "the OOD threshold is set on questions the profile was not fitted on (null: the fit split cross-fitted)",
        CALIBRATE,
        "differs",
    ),
    Agreement(
        "calibrate.ood_split",
        "evaluate.split",
        "the OOD flag's false-positive rate is measured on evaluate's split, so its threshold is set elsewhere",
        CALIBRATE_EVALUATE,
        "differs",
    ),
    Agreement(
        "calibrate.ood_split",
        "transfer.split",
        "the OOD flag's false-positive rate is measured on transfer's in-distribution split",
        CALIBRATE_TRANSFER,
        "differs",
    ),
)
"""Every cross-stage setting a recipe must keep in agreement, with the reason; :func:`check_agreements` checks them."""


def setting(config: RecipeView, key: str) -> tuple[Any, bool]:
    """``(value, given)`` of a dotted key; ``evaluate.options.<method>.<field>`` falls back to the method's default
    (``given`` False then)."""
    parts = key.split(".")
    if parts[:2] == ["evaluate", "options"] and len(parts) == 4:
        from workbench.methods.registry import settings_class

        options = config.evaluate.options.get(parts[2]) or {}
        if parts[3] in options:
            return options[parts[3]], True
        return {f.name: f.default for f in fields(settings_class(parts[2]))}[parts[3]], False
    return value_at(config, key), True


def violation(pair: Agreement, config: RecipeView) -> str | None:
    """What is wrong with ``pair`` in ``config`` (one line, ending with the reason), or None when it holds or its
    condition does not."""
    if not AGREEMENT_WHEN[pair.when](config):
        return None
    (mine, _), (theirs, given) = setting(config, pair.key), setting(config, pair.other)
    shown = f"{pair.other} is {theirs}" + ("" if given else " (its default)")
    if pair.relation == "equal" and mine != theirs:
        return f"is {mine} but {shown}: {pair.reason}; keep them equal"
    if pair.relation == "among" and mine not in theirs:
        return f"{mine!r} is not among {pair.other} {theirs}: {pair.reason}"
    if pair.relation == "differs" and mine == theirs:
        return f"{mine!r} is also {pair.other}: {pair.reason}"
    return None


def check_agreements(config: RecipeView, table: tuple[Agreement, ...] = AGREEMENTS) -> None:
    """Every pair of ``table`` whose condition holds agrees; else a one-line ConfigError naming the pair's ``key``
    and the other key."""
    for pair in table:
        problem = violation(pair, config)
        if problem:
            raise ConfigError(problem, pair.key)
