"""Settings two stages must keep in agreement, declared as one table and checked by one function at recipe load.

A stage that learns or records something (``key``) and a stage that uses it (``other``) must agree on the settings
that shape it: the budget the utility features are generated with, the top-k context, the class cuts, the split a
calibrator is fitted on. Each :class:`Agreement` names both keys, how they must relate, why, and when a recipe holds
both ends; :func:`check_agreements` checks them all. A stage that reads another's output adds its pair here, not a
check of its own; a pair a method makes agree (its context, budgets and class cuts against the stage that learns its
utility) is a row of its spec (:class:`~workbench.methods.spec.AgreementRow`), assembled into the same table. Checks
that concern one stage alone are that stage's own (:attr:`workbench.stages.registry.StageSpec.check`).

**Held-out means held out.** :data:`SPLIT_AGREEMENTS` declares that nothing a run ships is fitted or tuned on a split
it reports as held-out: every split a shipped part or parameter is fitted on (the calibrators and classify's classifier,
model choice and τ, the study's τ / α / θ, the utility classifier, the LARS scorer, the reader's and the controller's
training questions) differs from ``evaluate.split`` and from the study's ``test_split`` (which no trial reads). A
violation is a :class:`~workbench.core.settings.PairedKeyError`: the recipe loader names both keys with their file
and line. The export checks the same on the question ids themselves (:mod:`workbench.bundle.provenance`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal

from workbench.core.settings import PairedKeyError, RecipeView, value_at
from workbench.stages.export.settings import exported_methods

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


def _method_used(config: RecipeView, method: str, uses: tuple[str, ...]) -> bool:
    """Whether ``method`` is used by one of ``uses`` in this recipe: evaluated, exported or tuned in a study (each only
    when its stage runs)."""

    stages = config.stages
    return (
        ("evaluate" in uses and "evaluate" in stages and method in config.evaluate.methods)
        or ("export" in uses and "export" in stages and method in exported_methods(config))
        or ("study" in uses and "study" in stages and method in config.study.methods)
    )


def _runs(*stages: str) -> Callable[[RecipeView], bool]:
    """The condition "every one of ``stages`` is in the recipe"."""
    return lambda config: all(stage in config.stages for stage in stages)


def _lars_reported(config: RecipeView, reporter: str) -> bool:
    """The collection fits the LARS scorer (a feature a bundle's decision may ship) and ``reporter`` reports a split."""
    return "collect" in config.stages and "lars" in config.collect.features and reporter in config.stages


CALIBRATE = "calibrate runs"
TRANSFER = "transfer runs"
STUDY = "study runs"
STUDY_EVALUATE = "study and evaluate run"
STUDY_TRANSFER = "study and transfer run"
CALIBRATE_EVALUATE = "calibrate and evaluate run"
CALIBRATE_STUDY = "calibrate and study run"
CALIBRATE_TRANSFER = "calibrate and transfer run"
UTILITY_EVALUATE = "fit_utility and evaluate run"
LARS_EVALUATE = "lars is collected and evaluate runs"
LARS_STUDY = "lars is collected and study runs"
READER_EVALUATE = "tune_reader and evaluate run"
CONTROLLER_EVALUATE = "distill and evaluate run"

AGREEMENT_WHEN: dict[str, Callable[[RecipeView], bool]] = {
    CALIBRATE: _runs("calibrate"),
    TRANSFER: _runs("transfer"),
    STUDY: _runs("study"),
    STUDY_EVALUATE: _runs("study", "evaluate"),
    STUDY_TRANSFER: _runs("study", "transfer"),
    CALIBRATE_EVALUATE: _runs("calibrate", "evaluate"),
    CALIBRATE_STUDY: _runs("calibrate", "study"),
    CALIBRATE_TRANSFER: _runs("calibrate", "transfer"),
    UTILITY_EVALUATE: _runs("fit_utility", "evaluate"),
    LARS_EVALUATE: lambda config: _lars_reported(config, "evaluate"),
    LARS_STUDY: lambda config: _lars_reported(config, "study"),
    READER_EVALUATE: _runs("tune_reader", "evaluate"),
    CONTROLLER_EVALUATE: _runs("distill", "evaluate"),
}
"""The conditions of :data:`AGREEMENTS`, by name: ``condition(config) -> bool``."""


def _method_rows(held_out: bool) -> tuple[Agreement, ...]:
    """The rows the methods' specs contribute (:class:`~workbench.methods.spec.AgreementRow`), each condition added to
    :data:`AGREEMENT_WHEN` under its name."""
    from workbench.methods.registry import METHOD_TABLE

    rows = []
    for name, spec in METHOD_TABLE.items():
        for row in spec.agreements:
            if row.held_out != held_out:
                continue
            runs = _runs(*row.stages)
            AGREEMENT_WHEN.setdefault(
                row.when, lambda config, n=name, r=row, runs=runs: runs(config) and _method_used(config, n, r.uses)
            )
            rows.append(Agreement(row.key, row.other, row.reason, row.when, row.relation))  # type: ignore[arg-type]
    return tuple(rows)


AGREEMENTS: tuple[Agreement, ...] = (
    *_method_rows(held_out=False),
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
"""Every cross-stage setting a recipe must keep in agreement, with the reason (the methods' rows first, from their
specs); :func:`check_agreements` checks them."""

_EVALUATE = "evaluate reports that split as held-out"
_STUDY_TEST = "the study scores its chosen and default parameters there once, as held-out"

SPLIT_AGREEMENTS: tuple[Agreement, ...] = (
    Agreement(
        "study.split",
        "evaluate.split",
        f"the study tunes the τ / α / θ that evaluate runs and a bundle ships on it, and {_EVALUATE}",
        STUDY_EVALUATE,
        "differs",
    ),
    Agreement(
        "study.split",
        "study.test_split",
        f"every trial is scored on it, and {_STUDY_TEST} (no trial may read it)",
        STUDY,
        "differs",
    ),
    Agreement(
        "study.split",
        "transfer.split",
        "the study tunes the τ the transfer stage measures in distribution there (its held-out condition)",
        STUDY_TRANSFER,
        "differs",
    ),
    Agreement(
        "calibrate.fit_split",
        "evaluate.split",
        "the calibrators are fitted, and classify trains its classifier and chooses the model and τ, on it, and "
        + _EVALUATE,
        CALIBRATE_EVALUATE,
        "differs",
    ),
    Agreement(
        "calibrate.fit_split",
        "study.test_split",
        f"the calibrators and classify's classifier and τ are fitted on it, and {_STUDY_TEST}",
        CALIBRATE_STUDY,
        "differs",
    ),
    Agreement(
        "calibrate.ood_split",
        "study.test_split",
        f"the OOD flag's threshold is set on it, and {_STUDY_TEST}",
        CALIBRATE_STUDY,
        "differs",
    ),
    Agreement(
        "fit_utility.split",
        "evaluate.split",
        f"the utility classifier is trained on it, and {_EVALUATE}",
        UTILITY_EVALUATE,
        "differs",
    ),
    *_method_rows(held_out=True),
    Agreement(
        "collect.lars_fit_split",
        "evaluate.split",
        f"the LARS scorer is fitted on it, and {_EVALUATE}",
        LARS_EVALUATE,
        "differs",
    ),
    Agreement(
        "collect.lars_fit_split",
        "study.test_split",
        f"the LARS scorer is fitted on it, and {_STUDY_TEST}",
        LARS_STUDY,
        "differs",
    ),
    Agreement(
        "tune_reader.split",
        "evaluate.split",
        f"the reader adapter is trained on its articles, and {_EVALUATE}",
        READER_EVALUATE,
        "differs",
    ),
    Agreement(
        "distill_data.split",
        "evaluate.split",
        f"the distilled controller is trained on its questions, and {_EVALUATE}",
        CONTROLLER_EVALUATE,
        "differs",
    ),
)
"""Nothing shipped is fitted or tuned on a split the run reports as held-out (module docstring): each split a shipped
part or parameter is fitted on, against ``evaluate.split`` and the study's ``test_split`` (and the study's against
``transfer.split``, where the shipped decision is measured in distribution)."""


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


def check_agreements(config: RecipeView, table: tuple[Agreement, ...] = (*AGREEMENTS, *SPLIT_AGREEMENTS)) -> None:
    """Every pair of ``table`` whose condition holds agrees; else a one-line
    :class:`~workbench.core.settings.PairedKeyError` naming the pair's ``key`` (its ``where``) and the other key
    (which the recipe loader locates too: file and line of both)."""
    for pair in table:
        problem = violation(pair, config)
        if problem:
            raise PairedKeyError(problem, pair.key, pair.other)
