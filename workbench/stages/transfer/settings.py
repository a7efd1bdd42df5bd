"""The 'transfer' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.core.config import doc
from workbench.core.settings import RecipeView


@dataclass
class TransferSection:
    """The 'transfer' stage: the calibrators and the shipped decision measured in distribution and on another
    template family (docs/transfer.md)."""

    split: str = doc(
        "split whose articles both conditions use: its collected rows (in distribution) and the shifted questions",
        "test",
    )
    templates: list[str] = doc(
        "wiki-qa templates of the shifted questions, none of data.templates (default: the open-answer family)",
        ["cloze", "description", "two_hop"],
    )
    limit: int | None = doc("collect the first N shifted questions (null: all)", 120)
    bootstrap: int = doc("paired bootstrap resamples of the questions for the 90% BCa intervals", 2000)
    in_task_folds: int = doc(
        "folds of the in-task routers: every classify router also fitted on the shifted questions, cross-fitted, "
        "against the transferred one (0: no in-task table)",
        5,
        minimum=0,
    )


def check(config: RecipeView) -> None:
    """transfer's load check: wiki-qa, known shifted templates outside data.templates
    (:func:`workbench.stages.transfer.run.check_recipe`); its split's agreement with collect and calibrate is
    declared in :data:`workbench.stages.agreements.AGREEMENTS`."""
    from workbench.stages.transfer.run import check_recipe

    check_recipe(config)
