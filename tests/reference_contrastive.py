"""An independent, deliberately simple reference for D²-RAG's utility-aware contrastive decoding (test support only).

It follows the D²-RAG specification (``/work/shared/specs/seed-003-d2rag.md``) line by line and shares no code with
``workbench.decoding`` or the generator's private helpers:

* §7.5, ``ucd_generate`` pseudocode: ONE question at a time, the no-context ("main") prompt and the context prompt
  encoded separately, unpadded, batch size 1 per stream, no attention mask. Instead of a KV cache (``step(model, y,
  kv)`` in the pseudocode) the whole sequence ``prompt + y_<t`` is recomputed at every step: slower, same logits,
  and nothing in common with the engine's cache handling.
* §7.4, eqs. 35–37 and the [REC] lines: entropies in float32 from ``log_softmax``;
  ``w_t = H_m / (H_m + H_c + 1e-8)``, and 0.5 when ``H_m + H_c <= 1e-8`` (H_m: no-context stream, H_c: context
  stream), in both modes; ``λ_t = α · w_t`` (α = α_pos or α_neg, chosen by the caller).
* §7.4, eq. 7 (relevant, mode ``"pos"``): ``z_final = (1 + λ_t) z_RAG − λ_t z_Para``;
  eq. 8 (noisy, mode ``"neg"``): ``z_final = (1 + λ_t) z_Para − λ_t z_RAG``, on raw logits as the spec writes them.
* Algorithm 1 line 16 with §2.2 item 4: greedy ``y_t = argmax z_final``.
* §7.4: no plausibility mask.
* §7.5 "Decoding": stop at EOS (the EOS token is not part of the answer), at most ``max_new`` tokens.

Two things the pseudocode leaves out come from the workbench's decoding contract, not from the engine's code:
stop strings (D²-RAG passes ``"\\n"``: the answer text is cut before the first stop string and decoding ends), and
the "fixed strength" switch ``dynamic=False`` (``w_t = 1``, so ``λ_t = α``).

The engine's expert / amateur vocabulary maps onto the spec's as: ``parametric="amateur"`` is the relevant mode
(expert = context prompt, amateur = main prompt) and ``parametric="expert"`` the noisy mode (expert = main prompt,
amateur = context prompt); see :func:`reference_contrastive`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

EPS = 1e-8


@dataclass
class ReferenceResult:
    """What :func:`ucd_reference` decided.

    ``chosen`` holds the token chosen at EVERY step, the terminating one (EOS, the token that completes a stop string,
    or the last allowed step) included; ``token_ids`` are the answer tokens (EOS dropped; with a stop string, the
    shortest prefix of ``chosen`` whose decoded text covers ``text``). The per-step lists have one entry per step:
    λ_t, w_t, the winning z_final minus the runner-up (``margins``: how far from a tie the greedy choice was), the
    chosen token's log-prob under each stream and each stream's entropy, named by the spec's streams (``ctx`` =
    with context, ``main`` = without).
    """

    chosen: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str = "length"
    lambdas: list[float] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)
    logprob_ctx: list[float] = field(default_factory=list)
    logprob_main: list[float] = field(default_factory=list)
    entropy_ctx: list[float] = field(default_factory=list)
    entropy_main: list[float] = field(default_factory=list)


def eos_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """The ids that end a sequence: the tokenizer's EOS id and every EOS id of the model's generation config
    (spec §7.5: "stop at EOS (Llama has 3 EOS ids)")."""
    found: set[int] = set()
    for value in (tokenizer.eos_token_id, getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        if value is None:
            continue
        found.update([int(value)] if isinstance(value, int) else (int(v) for v in value))
    return frozenset(found)


def next_token_logits(model: Any, ids: Sequence[int]) -> torch.Tensor:
    """Float32 next-token logits ``z_t`` (shape ``[V]``) of ONE unpadded sequence, recomputed from scratch
    (spec §7.4: ``z_t = logit_θ(· | x, y_<t)``; no cache, no mask, no padding)."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([list(ids)], dtype=torch.long), use_cache=False)
    return out.logits[0, -1].float()


def shannon_entropy(logits: torch.Tensor) -> float:
    """H = −Σ_v p_v log p_v (nats) of softmax(logits), computed in float32 from ``log_softmax`` (spec eqs. 35–36)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    terms = logp.exp() * logp
    return float(-torch.where(torch.isfinite(logp), terms, torch.zeros_like(terms)).sum())


def ucd_reference(
    model: Any,
    tokenizer: Any,
    ids_main: Sequence[int],
    ids_ctx: Sequence[int],
    mode: str,
    alpha: float,
    *,
    max_new: int,
    eos_ids: Iterable[int],
    stop: Sequence[str] = (),
    dynamic: bool = True,
) -> ReferenceResult:
    """Utility-aware contrastive greedy decoding of one question, step by step (spec §7.5 ``ucd_generate``).

    ``ids_main`` / ``ids_ctx`` are the unpadded token ids of the no-context and the context prompt; ``mode`` is
    ``"pos"`` (relevant, eq. 7: ``z = (1+λ_t) z_ctx − λ_t z_main``) or ``"neg"`` (noisy, eq. 8:
    ``z = (1+λ_t) z_main − λ_t z_ctx``); ``λ_t = α · w_t`` with ``w_t = H_main / (H_main + H_ctx + 1e-8)``
    (eq. 37; 0.5 when both entropies vanish), or ``w_t = 1`` when ``dynamic`` is False. Each step picks
    ``argmax z`` and appends it to both streams. Decoding ends at an EOS id (not kept), when the decoded answer
    (special tokens skipped) contains a ``stop`` string (the text is cut before the earliest one), or after
    ``max_new`` steps.
    """
    if mode not in ("pos", "neg"):
        raise ValueError(f"mode must be 'pos' or 'neg', got {mode!r}")
    eos = frozenset(eos_ids)
    main, ctx = list(ids_main), list(ids_ctx)
    res = ReferenceResult()
    for _t in range(max_new):
        z_ctx, z_main = next_token_logits(model, ctx), next_token_logits(model, main)
        h_ctx, h_main = shannon_entropy(z_ctx), shannon_entropy(z_main)
        if not dynamic:
            w = 1.0
        elif h_main + h_ctx > EPS:
            w = h_main / (h_main + h_ctx + EPS)
        else:
            w = 0.5
        lam = alpha * w
        if mode == "pos":
            z = (1.0 + lam) * z_ctx - lam * z_main
        else:
            z = (1.0 + lam) * z_main - lam * z_ctx
        top2 = torch.topk(z, 2)
        y = int(top2.indices[0])
        lp_ctx, lp_main = torch.log_softmax(z_ctx, -1), torch.log_softmax(z_main, -1)
        res.chosen.append(y)
        res.lambdas.append(lam)
        res.weights.append(w)
        res.margins.append(float(top2.values[0] - top2.values[1]))
        res.logprob_ctx.append(float(lp_ctx[y]))
        res.logprob_main.append(float(lp_main[y]))
        res.entropy_ctx.append(h_ctx)
        res.entropy_main.append(h_main)
        if y in eos:
            res.finish_reason = "eos"
            break
        res.token_ids.append(y)
        text = tokenizer.decode(res.token_ids, skip_special_tokens=True)
        hits = [text.index(s) for s in stop if s in text]
        if hits:
            res.finish_reason = "stop"
            res.text = text[: min(hits)]
            res.token_ids = shortest_covering_prefix(tokenizer, res.token_ids, res.text)
            return res
        main.append(y)
        ctx.append(y)
    res.text = tokenizer.decode(res.token_ids, skip_special_tokens=True)
    return res


def shortest_covering_prefix(tokenizer: Any, ids: list[int], text: str) -> list[int]:
    """The shortest prefix of ``ids`` whose decoding (special tokens skipped) is at least as long as ``text``: the
    answer tokens behind a text cut before a stop string (a token that only carries the stop string is dropped)."""
    for k in range(len(ids) + 1):
        if len(tokenizer.decode(ids[:k], skip_special_tokens=True)) >= len(text):
            return ids[:k]
    return ids


def reference_contrastive(
    model: Any,
    tokenizer: Any,
    ids_expert: Sequence[int],
    ids_amateur: Sequence[int],
    alpha: float,
    *,
    parametric: str,
    max_new: int,
    eos_ids: Iterable[int],
    stop: Sequence[str] = (),
    dynamic: bool = True,
) -> ReferenceResult:
    """:func:`ucd_reference` called with the engine's expert / amateur naming (spec §7.5 "Positive mode: expert =
    context prompt, amateur = main prompt. Negative mode: expert = main prompt, amateur = context prompt").

    ``parametric`` names the no-context stream: ``"amateur"`` → mode ``"pos"`` (ids_ctx = expert, ids_main = amateur),
    ``"expert"`` → mode ``"neg"`` (ids_main = expert, ids_ctx = amateur). Same contract otherwise.
    """
    if parametric == "amateur":
        ids_main, ids_ctx, mode = ids_amateur, ids_expert, "pos"
    elif parametric == "expert":
        ids_main, ids_ctx, mode = ids_expert, ids_amateur, "neg"
    else:
        raise ValueError(f"parametric must be 'expert' or 'amateur', got {parametric!r}")
    return ucd_reference(
        model,
        tokenizer,
        ids_main,
        ids_ctx,
        mode,
        alpha,
        max_new=max_new,
        eos_ids=eos_ids,
        stop=stop,
        dynamic=dynamic,
    )
