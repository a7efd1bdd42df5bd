"""LLM-Check's attention score read for the ``attention_logdiag`` stat (D²-RAG paper eqs. 22–23): log A^h_jj of the
last layer at the greedy answer tokens' own positions, from one teacher-forced pass that records only those rows — for
answers whose greedy decode did not record it (:mod:`workbench.backends.attention_diag` reads it while decoding)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.backends.attention_diag import last_layer_logdiag
from workbench.backends.decoding_state import left_padded_batch
from workbench.backends.prompts import encode

__all__ = ["ATTENTION_SCOPE", "answer_attention_logdiag"]

ATTENTION_SCOPE = "answer_positions"
"""``attention_logdiag`` holds the greedy answer tokens' own positions only (the response span), not the prompt's:
see :func:`answer_attention_logdiag`."""


def answer_attention_logdiag(generator: Any, prompts: Sequence[str], answers: Sequence[Any]) -> list[np.ndarray]:
    """log A^h_jj of the LAST layer at the answer tokens' own positions, one ``(H, L)`` array per answer.

    LLM-Check's attention score (D²-RAG paper eqs. 22–23; Sriramanan et al. 2024) reads the diagonal of each head's
    post-softmax attention matrix Ker^h. For a sequence prompt (P tokens) + answer y_0..y_{L−1}, answer token y_j
    sits at position P + j, and its diagonal entry is the weight that the query at P + j puts on key P + j. One
    teacher-forced forward pass over prompt + answer (left-padded, batched by ``generator.batch_size``) reads
    exactly those entries: column j of the result is log A^h_{P+j, P+j}, for
    every head h. The prompt positions are left out (the scope :data:`ATTENTION_SCOPE`; LLM-Check's code slices the
    matrices to the response's token span the same way). The D²-RAG paper and TTLM average over prompt + answer
    (m = the whole sequence), where the prompt positions — which do not depend on the answer — dominate m.

    ``answers`` are :class:`~workbench.backends.generator.Generation` objects of ``prompts`` (their ``token_ids``
    — EOS excluded — and ``prompt_tokens``, the prompt ids the generator kept after left truncation). An answer
    with no token gets an ``(H, 0)`` array (the feature is then NaN). Probabilities are floored at 1e-12 before the
    log. Counts ``lm_calls`` (one per answer), ``lm_batches``, ``prefill_tokens`` (prompt) and ``scored_tokens``
    (answer) on ``generator.counter``.

    The decoding loop gives these entries at the step that FEEDS y_j (the step that predicts y_j runs the query at
    P + j − 1, whose diagonal belongs to the previous token), and feeds the last answer token only when a
    terminator follows it: ``Generator.generate(return_answer_attention=True)`` reads them so and feeds the last
    token of the answers that end at the cap once more; this pass serves the answers decoded without it.

    The pass runs under the model's own attention implementation with
    :func:`~workbench.backends.attention_diag.last_layer_logdiag` reading only the last layer's rows of the answer
    positions (the batch's longest answer's count of last queries), so its extra memory grows with the sequence
    length L, not L². A model whose last attention module the recorder cannot find is read from eager attention's
    returned weights instead (:func:`_eager_diagonals`: every layer's ``(batch, heads, L, L)`` weights).
    """
    import torch

    model = generator.model
    heads = int(model.config.num_attention_heads)
    out = [np.zeros((heads, 0)) for _ in answers]
    rows: list[tuple[int, list[int], int]] = []  # (answer index, prompt + answer ids, answer length)
    for i, (prompt, gen) in enumerate(zip(prompts, answers, strict=True)):
        answer = [int(t) for t in gen.token_ids]
        if not answer:
            continue
        ids = encode(generator.tokenizer, prompt)
        kept = int(getattr(gen, "prompt_tokens", 0) or len(ids))
        rows.append((i, ids[-kept:] + answer, len(answer)))
    if not rows:
        return out
    pad = generator.tokenizer.pad_token_id
    pad = generator.tokenizer.eos_token_id if pad is None else pad
    device = getattr(generator, "device", None) or next(model.parameters()).device
    counter = generator.counter
    size = max(int(generator.batch_size), 1)
    with torch.inference_mode():
        for start in range(0, len(rows), size):
            batch = rows[start : start + size]
            input_ids, mask, positions = left_padded_batch([seq for _, seq, _ in batch], pad)
            inputs = {"input_ids": input_ids.to(device), "attention_mask": mask.to(device)}
            inputs["position_ids"] = positions.to(device)
            longest = max(length for _, _, length in batch)
            with counter.timed("score"), last_layer_logdiag(model, queries=longest) as recorder:
                model(**inputs, use_cache=False, logits_to_keep=1)
            forwards = recorder.take()
            if len(forwards) == 1:
                diagonal = forwards[0].astype(np.float64)  # (B, H, longest): the last `longest` positions
            else:  # not wrapped (or a last layer run other than once): transformers' eager weights
                with counter.timed("score"):
                    diagonal = _eager_diagonals(model, inputs, longest)
            for b, (i, _, length) in enumerate(batch):
                out[i] = diagonal[b, :, longest - length :]
            counter.lm_calls += len(batch)  # prompts run through the model
            counter.lm_batches += 1
            counter.prefill_tokens += sum(len(seq) - length for _, seq, length in batch)
            counter.scored_tokens += sum(length for _, _, length in batch)
    return out


def _eager_diagonals(model: Any, inputs: dict[str, Any], last: int) -> np.ndarray:
    """log A^h_pp of ``model``'s last layer at the ``last`` last positions of ``inputs``, ``(B, H, last)`` float64,
    from eager attention's returned weights (floored at 1e-12): for models the recorder cannot wrap."""
    import torch

    previous = getattr(model.config, "_attn_implementation", None)
    if previous != "eager":
        model.set_attn_implementation("eager")  # SDPA / flash kernels do not return attention weights
    try:
        result = model(**inputs, output_attentions=True, use_cache=False, logits_to_keep=1)
    finally:
        if previous is not None and previous != "eager":
            model.set_attn_implementation(previous)
    diagonal = torch.diagonal(result.attentions[-1], dim1=-2, dim2=-1)[..., -last:]
    return np.log(np.maximum(diagonal.float().cpu().numpy().astype(np.float64), 1e-12))
