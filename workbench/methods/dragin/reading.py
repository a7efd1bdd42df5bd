"""What DRAGIN reads from the in-process model beyond a generation: the last layer's attention over prompt + answer
(one teacher-forced pass with eager attention, heads averaged) and every token's character span, so RIND and QFS
(:mod:`workbench.methods.dragin.rind`) can tie tokens to words."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from workbench.backends.prompts import encode

__all__ = ["AnswerReading", "read_answer"]


@dataclass
class AnswerReading:
    """One answer read for DRAGIN: ``attention`` ``(n, n)`` (the last layer's post-softmax weights, mean over heads,
    rows = queries) over the ``n`` positions prompt + answer; ``spans`` each position's ``(start, end)`` characters
    in ``text`` = prompt + decoded answer (a special token's span is empty); ``prompt_len`` the prompt's kept
    positions (the answer's tokens start there) and ``answer_start`` the character where the answer starts."""

    attention: np.ndarray
    spans: list[tuple[int, int]]
    text: str
    prompt_len: int
    answer_start: int


def _prompt_spans(tokenizer: Any, prompt: str, kept: int) -> tuple[list[int], list[tuple[int, int]]]:
    """The prompt's ids as the generator feeds them (:func:`encode`) and their character spans, the last ``kept``.
    A tokenizer that gives no offsets (a slow one), or other ids with them, leaves every span empty: QFS then reads
    the answer's words only."""
    ids = encode(tokenizer, prompt)
    bos = getattr(tokenizer, "bos_token", None)
    try:
        marked = tokenizer(prompt, add_special_tokens=not (bos and prompt.startswith(bos)), return_offsets_mapping=True)
        spans = [(int(a), int(b)) for a, b in marked["offset_mapping"]]
        same = list(marked["input_ids"]) == ids
    except NotImplementedError:  # transformers' slow tokenizers have no offset mapping
        spans, same = [], False
    if not same:
        spans = [(0, 0)] * len(ids)
    return ids[-kept:], spans[-kept:]


def _answer_spans(tokenizer: Any, ids: Sequence[int], offset: int) -> tuple[str, list[tuple[int, int]]]:
    """The decoded answer and each token's span in it (by decoding growing prefixes: a token that completes a
    multi-byte character owns it), shifted by ``offset``."""
    ends = [len(tokenizer.decode(list(ids[: i + 1]), skip_special_tokens=True)) for i in range(len(ids))]
    starts = [0, *ends[:-1]]
    text = tokenizer.decode(list(ids), skip_special_tokens=True)
    return text, [(offset + a, offset + max(a, b)) for a, b in zip(starts, ends, strict=True)]


def read_answer(generator: Any, prompt: str, generation: Any) -> AnswerReading:
    """One teacher-forced forward over ``prompt`` (the kept ``generation.prompt_tokens``, as decoded) + the answer's
    tokens with eager attention (SDPA returns no weights; the model's own mode is restored after), its last layer's
    attention averaged over heads. Counts one LM call, its prompt in ``prefill_tokens`` and its answer in
    ``scored_tokens`` on ``generator.counter``."""
    tokenizer, model = generator.tokenizer, generator.model
    answer = [int(t) for t in generation.token_ids]
    prompt_ids = encode(tokenizer, prompt)
    kept = int(getattr(generation, "prompt_tokens", 0) or len(prompt_ids))
    prompt_ids, prompt_spans = _prompt_spans(tokenizer, prompt, kept)
    text, answer_spans = _answer_spans(tokenizer, answer, len(prompt))
    device = getattr(generator, "device", None) or next(model.parameters()).device
    inputs = torch.tensor([prompt_ids + answer], device=device)
    previous = getattr(model.config, "_attn_implementation", None)
    counter = generator.counter
    with torch.inference_mode(), counter.timed("score"):
        if previous != "eager":
            model.set_attn_implementation("eager")
        try:
            result = model(input_ids=inputs, output_attentions=True, use_cache=False, logits_to_keep=1)
        finally:
            if previous is not None and previous != "eager":
                model.set_attn_implementation(previous)
        attention = result.attentions[-1][0].float().mean(dim=0).cpu().numpy().astype(np.float64)
    counter.lm_calls += 1
    counter.lm_batches += 1
    counter.prefill_tokens += len(prompt_ids)
    counter.scored_tokens += len(answer)
    return AnswerReading(attention, prompt_spans + answer_spans, prompt + text, len(prompt_ids), len(prompt))
