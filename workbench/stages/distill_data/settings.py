"""The 'distill_data' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from workbench.core.config import doc
from workbench.core.settings import RecipeView, check_own_section


@dataclass
class DistillDataSection:
    """The 'distill_data' stage: InSemRAG's controller decisions recorded from a prompted teacher, plus labels derived
    from the gold data, as the trace dataset a distilled controller learns from (spec §16; docs in
    workbench/stages/distill_data/run.py). Passages are cut at evaluate.passage_chars, as the evaluated method cuts
    them."""

    split: str = doc("split the training traces come from (a training split, never one you evaluate on)", "train")
    limit: int | None = doc(
        "first N questions of split (null: all); each runs InSemRAG's whole loop with the teacher (~30 model calls)",
        40,
    )
    heldout_split: str = doc("split of the dataset's 'heldout' traces (the student is scored on them)", "val")
    heldout_limit: int | None = doc("first N questions of heldout_split (null: all)", 20)
    teacher: str | None = doc(
        "the teacher's model: an embedded name, a local directory or an explicit HF hub id (null: generator.model); "
        "a larger instruct model where you have one",
        None,
    )
    sources: list[Literal["teacher", "gold"]] = doc(
        "where targets come from: teacher (the prompted teacher's replies; unusable ones are skipped and counted) and "
        "gold (refine / completeness / coverage / channel-weight labels derived from the gold passages and answers)",
        ["teacher", "gold"],
    )
    insemrag: dict[str, Any] = doc(
        "InSemRAG's settings while the teacher runs: the keys of evaluate.options.insemrag (e.g. {k1: 20, "
        "max_rounds: 2, enrich_tokens: 64}); controller stays prompted, its model is teacher",
        {},
    )
    seed: int = doc("seed of the gold completeness labels' synthetic damage (with each question id)", 0, minimum=0)


def check(config: RecipeView) -> None:
    """distill_data's load check: :func:`workbench.stages.distill_data.run.validate_section` on its section."""
    from workbench.stages.distill_data.run import validate_section

    check_own_section("distill_data", validate_section, config)
