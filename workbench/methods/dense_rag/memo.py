"""DENSE-RAG's per-question generation memo: a deterministic request is generated once per question, and each
chunk's rephrasing runs with its own new-token cap (spec A7: at least 1.5× the chunk's tokens)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["GenerationMemo", "token_count"]


def token_count(generator: Any, text: str) -> int:
    """``text``'s length in the generator's tokens (white-space words when it has no tokenizer)."""
    tokenizer = getattr(generator, "tokenizer", None)
    if tokenizer is None:
        return len(text.split())
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


class GenerationMemo:
    """A per-question memo in front of the generator: a deterministic ``generate`` request (same prompt and
    decoding parameters; the generator seeds samples per prompt) is answered from memory the second time, so a
    chunk is rephrased once per question and a context answered once. Everything else is delegated.

    Rephrasing prompts registered in ``rephrase_caps`` (prompt → new-token cap) are generated with their own cap
    whatever cap the request names (``dense_stats`` asks for all of a context's chunks in one call with one cap):
    the missing ones in one call per distinct cap, remembered without the request's cap. ``cut`` records the
    rephrasings that stopped at their cap (finish reason ``length``).

    Why not the generator's own cache: the evaluation stage turns that cache off (``evaluate.reuse_generations:
    false``), and where it is on, a repeat it answers is counted as a cached LM call (``cached_lm_calls``, and so in
    ``lm_calls_uncached``); a repeat the memo answers is no call at all, as in the paper's algorithm, which rephrases a
    chunk once per question. Measured on the tiny test model (an uncertain question, k = 2, 3 iterations): with the
    memo 4 LM calls; without it 7 with the cache off, or 4 plus 3 cached calls with it on — the same answers."""

    def __init__(self, generator: Any) -> None:
        self._generator = generator
        self._memo: dict[tuple[str, Any], Any] = {}
        self.rephrase_caps: dict[str, int] = {}
        self.cut: dict[str, bool] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._generator, name)

    @staticmethod
    def _params(kwargs: dict[str, Any]) -> Any:
        try:
            params = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in kwargs.items()))
            hash(params)
        except TypeError:
            return None
        return params

    def generate(self, prompts: Sequence[str], **kwargs: Any) -> list[Any]:
        if kwargs.get("n", 1) != 1:
            return self._generator.generate(prompts, **kwargs)
        prompts = list(prompts)
        if prompts and all(p in self.rephrase_caps for p in prompts):
            return self._rephrase(prompts, kwargs)
        params = self._params(kwargs)
        if params is None:
            return self._generator.generate(prompts, **kwargs)
        missing = list(dict.fromkeys(p for p in prompts if (p, params) not in self._memo))
        if missing:
            for prompt, output in zip(missing, self._generator.generate(missing, **kwargs), strict=True):
                self._memo[(prompt, params)] = output
        return [self._memo[(p, params)] for p in prompts]

    def _rephrase(self, prompts: list[str], kwargs: dict[str, Any]) -> list[Any]:
        """Rephrasings, each with its registered cap (see the class docstring)."""
        rest = {k: v for k, v in kwargs.items() if k != "max_new_tokens"}
        params = ("rephrase", self._params(rest))
        missing = list(dict.fromkeys(p for p in prompts if (p, params) not in self._memo))
        for cap in sorted({self.rephrase_caps[p] for p in missing}):
            group = [p for p in missing if self.rephrase_caps[p] == cap]
            for prompt, output in zip(group, self._generator.generate(group, max_new_tokens=cap, **rest), strict=True):
                self._memo[(prompt, params)] = output
                self.cut[prompt] = getattr(output, "finish_reason", None) == "length"
        return [self._memo[(p, params)] for p in prompts]
