"""A toy stage, as a new stage is written: its section, its load check and its function in its own module.

Registering it is one entry of the stage table (:data:`workbench.stages.registry.STAGES`); ``test_toy_stage.py`` adds
the entry and shows the recipe loading, running and printing the new section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView


@dataclass
class ToySection:
    """The 'toy' stage: write a greeting a number of times."""

    greeting: str = doc("the word the stage writes", "hello")
    repeats: int = doc("how many times it writes it", 2)


def check(config: RecipeView) -> None:
    """The toy stage's load check: a greeting without spaces (one word)."""
    if not config.toy.greeting or " " in config.toy.greeting:
        raise ConfigError(f"give one word, got {config.toy.greeting!r}", "toy.greeting")


def run(ctx: Any) -> dict[str, Any]:
    """Write ``toy.txt`` (the greeting, ``repeats`` times) to the stage's output; return the word count."""
    section = ctx.config.toy
    (ctx.out_dir / "toy.txt").write_text(" ".join([section.greeting] * section.repeats))
    return {"words": section.repeats}
