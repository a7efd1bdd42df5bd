"""What both generators (in-process and served) do around generation: decoding parameters, the generation cache.

:func:`decoding_params` builds the normalised, validated :class:`~workbench.backends.generation_types.DecodingParams`
of one ``generate`` call. :class:`CachedGenerations` is the cache side of ``generate``: look every (prompt, sample)
up, count hits, misses and what the cache saved on the :class:`~workbench.backends.cost.CostCounter`, store what was
generated, and assemble the flat prompt-major answer list. A class using it has ``cache``, ``counter``,
``fingerprint`` and ``max_context`` attributes and may override the hooks :meth:`CachedGenerations._key_text`,
:meth:`CachedGenerations._key_extra` and :meth:`CachedGenerations._cached_prompt_tokens`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

from workbench.backends.gencache import GenerationCache
from workbench.backends.generation_types import DecodingParams, Generation


def decoding_params(
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    top_k: int,
    stop: Sequence[str] | None,
    seed: int | None,
    n: int,
    hidden_layer: int | None = None,
    attentions: bool = False,
    top_logprobs: int = 0,
    answer_attention: bool = False,
) -> DecodingParams:
    """The normalised parameters of one ``generate`` call; ``ValueError`` for out-of-range values or ``n < 1``."""
    params = DecodingParams(
        max_new_tokens=max_new_tokens,
        temperature=float(temperature),
        top_p=float(top_p),
        top_k=int(top_k),
        stop=tuple(stop or ()),
        seed=seed,
        hidden_layer=hidden_layer,
        attentions=attentions,
        top_logprobs=int(top_logprobs),
        answer_attention=bool(answer_attention),
    ).normalised()
    params.validate()
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return params


class CachedGenerations:
    """The generation-cache side of ``generate`` (see the module docstring)."""

    cache: Any
    counter: Any
    fingerprint: str
    max_context: int

    # ------------------------------------------------------------------ hooks
    def _key_text(self, prompt: Hashable) -> str:
        """The text a prompt key is cached under (the prompt itself by default)."""
        return str(prompt)

    def _key_extra(self, prompt: Hashable) -> dict[str, Any]:
        """Extra request fields of a prompt's cache key (none by default)."""
        return {}

    def _cached_prompt_tokens(self, prompt: Hashable, first: Generation, params: DecodingParams) -> int:
        """The prompt tokens a fully cached prompt would have cost (its first sample's record by default)."""
        return int(first.prompt_tokens)

    # ------------------------------------------------------------------ the cache
    def _key(self, prompt: Hashable, sample: int, params: DecodingParams) -> str:
        """Cache key of one sample (see :meth:`~workbench.backends.gencache.GenerationCache.make_key`)."""

        request = {**params.key_fields(), "max_context": self.max_context, **self._key_extra(prompt)}
        return GenerationCache.make_key(self.fingerprint, self._key_text(prompt), request, sample)

    def _lookup(
        self, prompts: list[Hashable], needed: int, params: DecodingParams
    ) -> dict[tuple[Hashable, int], Generation]:
        """Cached generations for every distinct (prompt, sample index); counts hits, misses and what was saved: per
        fully cached prompt one ``cached_lm_calls`` and its prefill tokens, per cached sample its answer tokens."""
        if self.cache is None:
            return {}
        keys = {(p, j): self._key(p, j, params) for p in dict.fromkeys(prompts) for j in range(needed)}
        hits = self.cache.get_many(list(keys.values()))
        found = {pj: hits[key] for pj, key in keys.items() if key in hits}
        self.counter.cache_hits += len(found)
        self.counter.cache_misses += len(keys) - len(found)
        for prompt in dict.fromkeys(p for p, _ in found):
            if all((prompt, j) in found for j in range(needed)):
                self.counter.cached_lm_calls += 1
                self.counter.cached_prefill_tokens += self._cached_prompt_tokens(prompt, found[(prompt, 0)], params)
        self.counter.cached_decoded_tokens += sum(len(gen.token_ids) for gen in found.values())
        return found

    def _store(self, fresh: dict[tuple[Hashable, int], Generation], params: DecodingParams) -> None:
        """Write newly generated samples to the cache (if any)."""
        if self.cache is not None and fresh:
            self.cache.put_many({self._key(p, j, params): gen for (p, j), gen in fresh.items()})

    @staticmethod
    def _assemble(
        prompts: list[Hashable], n: int, found: dict[tuple[Hashable, int], Generation], greedy: bool
    ) -> list[Generation]:
        """The flat, prompt-major answer list: sample ``j`` of each prompt (greedy: copies of sample 0)."""
        out: list[Generation] = []
        for prompt in prompts:
            for j in range(n):
                gen = found[(prompt, 0 if greedy else j)]
                out.append(gen if gen.sample_index == j else replace(gen, sample_index=j))
        return out
