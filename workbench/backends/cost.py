"""Cost accounting shared by every backend: LM calls, prefill and decoded tokens, NLI pairs, retrieval calls.

``lm_calls`` counts **prompts** run through the model, not forward batches: eight questions answered in one batched
generate call are eight LM calls, exactly as eight one-question calls would be, so a method's LM calls per question
do not depend on how it batches (or on ``generator.batch_size``). The forward batches are ``lm_batches``.

Work the generation cache saved is counted apart, never as real work: ``cached_lm_calls``, ``cached_prefill_tokens``
and ``cached_decoded_tokens`` hold what the cached generations would have cost uncached, so a run on a warm cache
reports both what it paid (``lm_calls``, ``prefill_tokens``, ``decoded_tokens``) and what it would pay on a cold one
(the sums of the two).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class CostCounter:
    """Additive cost counters.

    ``lm_calls``: prompts run through the model — one per prompt generated from (its ``n`` samples share the
    prompt's prefill and count once), per (prompt, continuation) pair scored, per prompt read by a next-token
    log-prob call; a contrastive decoder's two streams are two prompts. ``lm_batches``: forward batches (one prefill
    and its decoding loop, or one teacher-forced pass), however many prompts each holds. ``prefill_tokens`` counts
    prompt tokens encoded (shared prefills count once); ``decoded_tokens`` counts tokens generated or teacher-forced
    one step at a time; ``seconds`` maps a step name to accumulated wall time.

    A generation answered from the generation cache is not a call and costs no tokens; what it saved is counted
    apart. A prompt whose samples all came from the cache adds 1 to ``cached_lm_calls`` and its prompt tokens (as
    its shared prefill would have counted them, after left truncation) to ``cached_prefill_tokens``; every cached
    sample adds its answer tokens (``len(token_ids)``: the terminating EOS or stop-string token, which the decoding
    loop also ran, is not kept, so a sample that ended on one counts one token short) to ``cached_decoded_tokens``.
    A prompt with some samples missing is a real call: its prefill and the missing samples' decoding count as usual.

    ``prefix_reused_tokens``: the part of ``prefill_tokens`` that prefix reuse did not forward — a prompt prefix
    shared by k rows of one forward counts k times in ``prefill_tokens`` (every prompt's cost stays its own, whatever
    it was batched with) but is encoded once, so it adds (k − 1) × its length here
    (:mod:`workbench.backends.prefix_reuse`). The prefill token-forwards actually run are ``prefill_tokens −
    prefix_reused_tokens``. (A counter serialised before this field existed reads as 0.)
    """

    lm_calls: int = 0
    lm_batches: int = 0
    prefill_tokens: int = 0
    decoded_tokens: int = 0
    scored_tokens: int = 0
    truncated_prompts: int = 0
    nli_pairs: int = 0
    embed_texts: int = 0
    retrieval_calls: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    cached_lm_calls: int = 0
    cached_prefill_tokens: int = 0
    cached_decoded_tokens: int = 0
    prefix_reused_tokens: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, other: CostCounter) -> CostCounter:
        """Add ``other``'s counts into this counter (in place) and return it."""
        for f in fields(self):
            if f.name == "seconds":
                for key, value in other.seconds.items():
                    self.seconds[key] = self.seconds.get(key, 0.0) + value
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def snapshot(self) -> CostCounter:
        """An independent copy of the current counts."""
        copy = CostCounter(**{k: v for k, v in asdict(self).items() if k != "seconds"})
        copy.seconds = dict(self.seconds)
        return copy

    def since(self, earlier: CostCounter) -> CostCounter:
        """The counts accumulated after ``earlier`` (a snapshot of this counter)."""
        out = CostCounter()
        for f in fields(self):
            if f.name == "seconds":
                out.seconds = {
                    k: v - earlier.seconds.get(k, 0.0) for k, v in self.seconds.items() if v != earlier.seconds.get(k)
                }
            else:
                setattr(out, f.name, getattr(self, f.name) - getattr(earlier, f.name))
        return out

    def as_dict(self) -> dict:
        """Plain dict (JSON-ready)."""
        return asdict(self)

    @contextmanager
    def timed(self, step: str) -> Iterator[None]:
        """Accumulate the wall time of the ``with`` block under ``seconds[step]``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[step] = self.seconds.get(step, 0.0) + time.perf_counter() - start


def generation_cost(generation: Any) -> dict[str, float]:
    """What a generator counted for one prompt answered with one sample (``n = 1``), as
    :class:`CostCounter` fields, so a batched call's cost can be charged to each prompt's own question.

    Made by the call (``generation.decode_steps`` set): one LM call, its prompt tokens (``prompt_tokens``: after
    truncation, padding excluded) and its decoding steps. Served by the generation cache (``decode_steps`` None):
    one cached LM call, its prompt tokens and its answer tokens (``len(token_ids)``, as the cache counts them). A
    backend that records neither (a served model) is priced as the cache prices — a caller that checks the sum
    against the counter (:func:`~workbench.methods.base.shared_step`) then sees the mismatch."""
    steps = getattr(generation, "decode_steps", None)
    prompt = float(getattr(generation, "prompt_tokens", 0) or 0)
    if steps is not None:
        return {"lm_calls": 1.0, "prefill_tokens": prompt, "decoded_tokens": float(steps)}
    answer = float(len(getattr(generation, "token_ids", ())))
    return {"cached_lm_calls": 1.0, "cached_prefill_tokens": prompt, "cached_decoded_tokens": answer}
