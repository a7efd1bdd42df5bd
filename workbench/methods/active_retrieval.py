"""Token-level helpers of the active-retrieval methods (FLARE, DRAGIN): methods that decide *during* generation,
from the generated tokens' probabilities, whether and with what query to retrieve.

Each function is written once here and imported by the method packages:

* :func:`token_probs` / :func:`min_token_prob` — the generated tokens' probabilities from their log-probs;
* :func:`masked_query` — a sentence with its low-confidence tokens left out (FLARE's implicit query);
* :func:`sentence_end` / :func:`prefix_tokens` / :func:`first_sentence` — the first sentence of a generation, in
  characters and in tokens;
* :func:`tokenizer_of` — the generator's tokenizer, refused in one line where a served model has none;
* :func:`continue_answers` — one batched greedy continuation of partial answers, with or without passages, in the
  same answering prompt as every other method.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.core.errors import ConfigError
from workbench.methods.base import Tools
from workbench.methods.common import prompt_for

__all__ = [
    "Sentence",
    "continue_answers",
    "first_sentence",
    "masked_query",
    "min_token_prob",
    "prefix_tokens",
    "sentence_end",
    "token_probs",
    "tokenizer_of",
]

Decode = Callable[[Sequence[int]], str]
"""Token ids to text (the tokenizer's ``decode`` with special tokens skipped)."""

# A sentence ends at ., ! or ? (closing quotes / brackets kept with it) followed by white space or the end of the
# text; "3.5" or "e.g.," do not end one.
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s|$)")


def token_probs(logprobs: Sequence[float] | np.ndarray) -> np.ndarray:
    """The tokens' probabilities ``exp(logprob)`` as a float64 array (an empty one for no tokens)."""
    return np.exp(np.asarray(logprobs, dtype=np.float64).reshape(-1))


def min_token_prob(logprobs: Sequence[float] | np.ndarray) -> float:
    """The lowest probability among the tokens (1.0 for no tokens: nothing is uncertain)."""
    probs = token_probs(logprobs)
    return float(probs.min()) if probs.size else 1.0


def masked_query(token_ids: Sequence[int], logprobs: Sequence[float] | np.ndarray, beta: float, decode: Decode) -> str:
    """The sentence's text with every token of probability below ``beta`` left out (Jiang et al., 2023, §3.2.2,
    masked sentences as implicit queries: tokens with ``p < β`` are masked so that a possibly wrong token does not
    steer the search). ``beta = 0`` keeps every token. Returns the kept tokens decoded together, stripped."""
    keep = token_probs(logprobs) >= beta
    if len(keep) != len(token_ids):
        raise ValueError(f"{len(token_ids)} token ids but {len(keep)} log-probs")
    return decode([int(t) for t, kept in zip(token_ids, keep, strict=True) if kept]).strip()


def sentence_end(text: str) -> int | None:
    """The character offset just past the first sentence of ``text`` (None: no sentence ends in it). Leading white
    space is no sentence."""
    for match in _SENTENCE_END.finditer(text):
        if text[: match.start()].strip():
            return match.end()
    return None


def prefix_tokens(token_ids: Sequence[int], chars: int, decode: Decode) -> int:
    """The fewest leading tokens whose decoding covers the first ``chars`` characters (all of them if none does)."""
    for n in range(1, len(token_ids) + 1):
        if len(decode([int(t) for t in token_ids[:n]])) >= chars:
            return n
    return len(token_ids)


@dataclass(frozen=True)
class Sentence:
    """The first sentence of a generation: its ``text``, its ``token_ids`` and their ``logprobs``, and whether it is
    the whole generation (``whole``: nothing was cut after it)."""

    text: str
    token_ids: list[int]
    logprobs: np.ndarray
    whole: bool


def first_sentence(generation: Any, decode: Decode) -> Sentence:
    """The first sentence of ``generation`` (a :class:`~workbench.backends.generation_types.Generation`): its text
    up to :func:`sentence_end` and the tokens that cover it (:func:`prefix_tokens`); the whole generation when no
    sentence ends inside it."""
    text = str(generation.text)
    ids = [int(t) for t in generation.token_ids]
    logprobs = np.asarray(generation.logprobs, dtype=np.float64)
    end = sentence_end(text)
    if end is None or not text[end:].strip():
        return Sentence(text, ids, logprobs, True)
    n = prefix_tokens(ids, end, decode)
    return Sentence(text[:end], ids[:n], logprobs[:n], False)


def tokenizer_of(tools: Tools, method: str) -> Decode:
    """``decode`` of the generator's tokenizer (special tokens skipped); a served model without one (chat-only) is
    refused in one line at ``method``: cutting sentences and masking tokens needs the token texts."""
    tokenizer = getattr(tools.generator, "tokenizer", None)
    if tokenizer is None:
        raise ConfigError(
            f"{method} reads the generated tokens' texts, which need the model's tokenizer (set generator.tokenizer)",
            method,
        )

    def decode(ids: Sequence[int]) -> str:
        return str(tokenizer.decode(list(ids), skip_special_tokens=True))

    return decode


def continue_answers(
    tools: Tools,
    questions: Sequence[str],
    contexts: Sequence[str | None],
    prefixes: Sequence[str],
    max_new_tokens: Sequence[int],
) -> list[Any]:
    """Greedy continuations of partial answers: question ``i``'s answering prompt (:func:`~workbench.methods.common.
    prompt_for`, with ``contexts[i]`` or closed-book) followed by ``prefixes[i]``, the answer so far; at most
    ``max_new_tokens[i]`` new tokens, stopping at a newline as every answer does. One generate call per distinct
    budget (a single call when all are equal). Each Generation also carries ``built`` (the prompt object)."""
    built = [prompt_for(tools, q, c, budget) for q, c, budget in zip(questions, contexts, max_new_tokens, strict=True)]
    outputs: list[Any] = [None] * len(built)
    for budget in sorted(set(max_new_tokens)):
        rows = [i for i, b in enumerate(max_new_tokens) if b == budget]
        prompts = [built[i].text + prefixes[i] for i in rows]
        for i, out in zip(
            rows, tools.generator.generate(prompts, temperature=0.0, max_new_tokens=budget, stop=("\n",)), strict=True
        ):
            out.built = built[i]
            outputs[i] = out
    return outputs
