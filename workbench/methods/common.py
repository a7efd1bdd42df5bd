"""Helpers every method shares: the answering prompt, context blocks, batched greedy answers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.backends.prompts import ANSWER_SYSTEM, number_chunks
from workbench.methods.base import Passage, Tools

__all__ = ["ANSWER_SYSTEM", "context_block", "generate_answers", "prompt_for"]


def context_block(passages: Sequence[Passage], max_chars: int | None) -> str | None:
    """``[i] title: text`` lines in the given order (None for no passages: the closed-book prompt)."""
    if not passages:
        return None
    return number_chunks([p.prompt_text(max_chars) for p in passages])


def prompt_for(tools: Tools, question: str, context: str | None, max_new_tokens: int | None = None) -> Any:
    """The answering prompt (the same system prompt and template as ``collect``), context cut to fit the window.

    Returns the generator's built prompt (``.text``, ``.n_tokens``, ``.truncated``).
    """
    return tools.generator.build_prompt(
        question, context, max_new_tokens=max_new_tokens or tools.max_new_tokens, system=ANSWER_SYSTEM
    )


def generate_answers(
    tools: Tools, questions: Sequence[str], contexts: Sequence[str | None], max_new_tokens: int | None = None
) -> list[Any]:
    """Greedy answers (stop at a newline), one batched generate call; returns the generator's Generations.

    Each Generation also carries ``built`` (the prompt object, whose ``truncated`` flag says the context was cut).
    """
    budget = max_new_tokens or tools.max_new_tokens
    built = [prompt_for(tools, q, c, budget) for q, c in zip(questions, contexts, strict=True)]
    outputs = tools.generator.generate([b.text for b in built], temperature=0.0, max_new_tokens=budget, stop=("\n",))
    for output, prompt in zip(outputs, built, strict=True):
        output.built = prompt
    return outputs
