"""Prompts to jobs: token-id prompts, left-truncation to the context budget, and the generation-cache key hooks.

A prompt is rendered text or a list of **token ids**. Ids are decoded to the text they stand for
(:meth:`PromptJobs.decode_prompt`); when that text encodes back to the same ids the prompt *is* that text — same
sampling seeds, same cache keys, the same generations as the text prompt — else it keeps its ids (and its cache key
holds them, :class:`IdsPrompt`). Every distinct prompt with samples missing from the cache becomes one :class:`Job`.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.backends.generation_lookup import CachedGenerations
from workbench.backends.generation_types import DecodingParams, Generation
from workbench.backends.generator.state import GeneratorState
from workbench.backends.prompts import encode

log = logging.getLogger("workbench.backends.generator")

Prompt = str | Sequence[int]
"""A prompt for :meth:`~workbench.backends.generator.Generator.generate`: rendered text, or its token ids."""


@dataclass(frozen=True)
class IdsPrompt:
    """The key of a token-id prompt whose decoded ``text`` does not encode back to its ``ids``."""

    text: str
    ids: tuple[int, ...]


@dataclass
class Job:
    """One prompt to run, with the sample indices still missing for it; ``key`` identifies it among the prompts of
    one call (its text, or an :class:`IdsPrompt`)."""

    prompt: str
    ids: list[int]
    samples: list[int]
    key: Hashable = None

    def __post_init__(self) -> None:
        if self.key is None:
            self.key = self.prompt


class PromptJobs(GeneratorState, CachedGenerations):
    """Turning prompts into :class:`Job` s: decoding token-id prompts, keys for the generation cache, truncation."""

    def decode_prompt(self, ids: Sequence[int]) -> tuple[str, bool]:
        """The text that token ids stand for, and whether it encodes back to exactly those ids (as :meth:`generate`
        encodes a text prompt). A leading BOS the tokenizer adds by itself is left out of the text when that makes
        it encode back. ``ValueError`` for no ids or an id outside the model's vocabulary."""
        ids = [int(i) for i in ids]
        if not ids:
            raise ValueError("a token-id prompt needs at least one token id")
        vocab = self.vocab_size
        bad = next((i for i in ids if not 0 <= i < vocab), None)
        if bad is not None:
            raise ValueError(f"token id {bad} is outside the vocabulary (0..{vocab - 1})")
        candidates = []
        bos = self.tokenizer.bos_token_id
        if bos is not None and ids[0] == bos and len(ids) > 1:
            candidates.append(ids[1:])
        candidates.append(ids)
        texts = [
            self.tokenizer.decode(c, skip_special_tokens=False, clean_up_tokenization_spaces=False) for c in candidates
        ]
        for text in texts:
            if text and encode(self.tokenizer, text) == ids:
                return text, True
        return texts[-1], False

    @property
    def vocab_size(self) -> int:
        """The number of token ids the model takes (its embedding rows; may exceed the tokenizer's)."""
        return int(self.model.get_input_embeddings().num_embeddings)

    def _prompt_key(self, prompt: Prompt) -> Hashable:
        """A text prompt's key is itself; a token-id prompt's is the text it encodes (see :meth:`decode_prompt`), else
        an :class:`IdsPrompt`."""
        if isinstance(prompt, str):
            return prompt
        text, same = self.decode_prompt(prompt)
        return text if same else IdsPrompt(text, tuple(int(i) for i in prompt))

    @staticmethod
    def _key_text(key: Hashable) -> str:
        return key.text if isinstance(key, IdsPrompt) else str(key)

    def _key_extra(self, prompt: Hashable) -> dict[str, Any]:
        """A token-id prompt that is not its text's encoding adds its ids to the cache key."""
        return {"prompt_ids": list(prompt.ids)} if isinstance(prompt, IdsPrompt) else {}

    def _cached_prompt_tokens(self, prompt: Hashable, first: Generation, params: DecodingParams) -> int:
        """The prompt's tokens after truncation (recorded on the generation; counted again for older cache blobs)."""
        if first.prompt_tokens:
            return int(first.prompt_tokens)
        full = len(prompt.ids) if isinstance(prompt, IdsPrompt) else len(encode(self.tokenizer, prompt))
        return min(full, max(self.max_context - params.max_new_tokens, 1))

    def _missing_jobs(
        self,
        prompts: list[Hashable],
        needed: int,
        params: DecodingParams,
        found: dict[tuple[Hashable, int], Generation],
    ) -> list[Job]:
        """One job per distinct prompt with missing samples, prompt ids truncated to the context budget."""
        budget = self.max_context - params.max_new_tokens
        if budget < 1:
            raise ValueError(f"max_new_tokens={params.max_new_tokens} leaves no room in max_context={self.max_context}")
        jobs = []
        for key in dict.fromkeys(prompts):
            missing = [j for j in range(needed) if (key, j) not in found]
            if not missing:
                continue
            if isinstance(key, IdsPrompt):
                jobs.append(Job(key.text, self._fit(list(key.ids), budget), missing, key))
            else:
                jobs.append(Job(key, self.encode_prompt(key, budget), missing))
        return jobs

    def encode_prompt(self, prompt: str, budget: int) -> list[int]:
        """Prompt token ids, left-truncated to ``budget`` tokens (counted in ``truncated_prompts``, warned once);
        ``ValueError`` for a prompt that encodes to no tokens."""
        ids = encode(self.tokenizer, prompt)
        if not ids:
            raise ValueError(f"prompt {prompt!r} encodes to no tokens")
        return self._fit(ids, budget)

    def _fit(self, ids: list[int], budget: int) -> list[int]:
        """``ids`` left-truncated to ``budget`` tokens (counted and warned once, see :meth:`encode_prompt`)."""
        if len(ids) <= budget:
            return ids
        self.counter.truncated_prompts += 1
        if not self._warned_truncation:
            self._warned_truncation = True
            log.warning(
                "prompt of %d tokens cut from the left to %d; use build_prompt to cut the context only",
                len(ids),
                budget,
            )
        return ids[-budget:]

    _encode_prompt = encode_prompt  # the former private name, kept for callers that still use it
