"""Contrastive decoding with two logit streams (D²-RAG spec §7.4–§7.5): one batched forward per step.

Each pair has an **expert** prompt and an **amateur** prompt. At every step the next token is the arg-max of

    s_t = (1 + λ_t) · log p_expert(· | y_<t) − λ_t · log p_amateur(· | y_<t),   λ_t = α · w_t,

and the chosen token is appended to BOTH streams (greedy decoding; spec §13.21). The spec writes the rule on logits;
on log-probs it is the same arg-max, because the weights sum to 1 and each distribution's log-normaliser only adds a
constant to every entry. No plausibility mask is applied (spec §7.4 [REC]).

The dynamic entropy factor (spec eq. 37, the ACD weight) is

    w_t = H_para,t / (H_para,t + H_rag,t + 1e-8),   and 0.5 when H_para,t + H_rag,t < 1e-8,

with H the Shannon entropy (nats, float32, from ``log_softmax``) of the **no-context** (parametric) stream and of the
**with-context** stream. Which of expert / amateur is the parametric stream depends on the mode: in the relevant
mode the amateur is parametric (expert = with context), in the noisy mode the expert is (``parametric="expert"``).
The same w_t formula is used in both modes, as the paper writes it. With ``dynamic=False`` w_t = 1 (λ_t = α).
α = 0 is plain greedy decoding of the expert prompt.

Engines:

* :func:`contrastive_generate` stacks the expert rows and the amateur rows of a batch of pairs into ONE batch of 2B
  left-padded rows (per-row attention masks and position ids, one KV cache whose rows are the streams): one forward
  per decoding step for both streams of every active pair. The prompts are encoded by one forward per stream, each
  padded only to its own width, and the two caches are then joined (:func:`prefill_streams`), so a short
  closed-book prompt is not padded to the width of a prompt with five passages. The amateurs need not encode the
  prefix both streams share (the chat header and system prompt): they continue the experts' rows over it when that
  saves more prefill tokens than the generator's own prefix reuse among them (:func:`prefill_amateurs`; always for
  a single pair). The joined cache then gets room for the answer's positions
  (:func:`~workbench.backends.decoding_state.reserve_positions`): a step writes its keys and values in place, where
  a plain cache would copy all 2B rows — the amateurs' padded to the experts' width — at every step. Finished
  pairs leave the batch (both their rows, cache included) at once.
* :func:`sequential_contrastive_generate` is the reference: the same decisions with two forwards per step (the expert
  batch, then the amateur batch), each with its own cache — the shape of the spec's pseudocode. It exists for parity
  tests and for :func:`workbench.bench.decoding.run.benchmark_contrastive`.

The generator's public step API is reused (its prompt encoding and truncation ``encode_prompt``, ``prefill`` /
``prefill_continuing`` / ``step``, ``select_rows`` / ``join_states``, the stop / EOS rule ``finish_row`` and the
answer-token bookkeeping ``answer``), so α = 0 reproduces ``generator.generate(..., temperature=0)`` exactly.

Costs go to ``generator.counter``: ``lm_calls`` +2 per pair (its two prompts, expert and amateur, in either engine);
``lm_batches`` +1 per batch of pairs (at most ``generator.batch_size`` pairs; one for any request that fits one
batch) in the batched engine, +2 in the sequential one (one per stream);
``prefill_tokens`` the prompt tokens of both streams (padding excluded; a reused prefix counts in every row, its
saving in ``prefix_reused_tokens``); ``decoded_tokens`` 2 per step per active pair.
Generations are not cached (the generation cache keys single-prompt requests).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.backends.decoding_state import reserve_positions
from workbench.backends.generator import DecodingParams, DecodingRow, join_states, joinable, select_rows
from workbench.backends.prefix_reuse import common_prefix_length, plan_prefix_groups, row_prefix_cache

__all__ = [
    "ContrastiveGeneration",
    "StepChoice",
    "choose_tokens",
    "contrastive_generate",
    "contrastive_scores",
    "entropy",
    "entropy_weight",
    "sequential_contrastive_generate",
]

STREAMS = ("expert", "amateur")
ENTROPY_EPS = 1e-8


@dataclass
class ContrastiveGeneration:
    """One contrastively decoded continuation (plain Python / numpy).

    ``text`` / ``token_ids`` / ``finish_reason`` follow :class:`~workbench.backends.generator.Generation`: the text is
    cut before the first stop string, ``token_ids`` are the answer tokens (EOS and stop-only tokens excluded).
    The per-step arrays (float32) cover EVERY decoding step taken, the terminating one included, so they may be
    longer than ``token_ids``: ``lambdas`` λ_t, ``weights`` w_t (1 when ``dynamic`` is off), the chosen token's raw
    log-prob under each stream, and each stream's full-vocabulary entropy.
    """

    expert_prompt: str
    amateur_prompt: str
    text: str
    token_ids: np.ndarray
    finish_reason: str
    alpha: float
    parametric: str
    dynamic: bool
    lambdas: np.ndarray
    weights: np.ndarray
    expert_logprobs: np.ndarray
    amateur_logprobs: np.ndarray
    expert_entropies: np.ndarray
    amateur_entropies: np.ndarray
    prompt_tokens: tuple[int, int] = (0, 0)

    @property
    def steps(self) -> int:
        """The number of decoding steps taken (forward positions whose output was used)."""
        return int(self.lambdas.size)

    def cost(self) -> dict[str, float]:
        """What this pair cost, as :class:`~workbench.backends.cost.CostCounter` fields: two LM calls (the streams),
        both prompts' tokens and two tokens per decoding step — the pair's own share of a batched call."""
        return {"lm_calls": 2.0, "prefill_tokens": float(sum(self.prompt_tokens)), "decoded_tokens": 2.0 * self.steps}

    def summary(self) -> dict[str, Any]:
        """A JSON-ready digest for traces: α, steps, mean / per-step λ_t and w_t, finish reason."""
        return {
            "alpha": self.alpha,
            "parametric": self.parametric,
            "dynamic": self.dynamic,
            "steps": self.steps,
            "finish_reason": self.finish_reason,
            "lambda_mean": float(self.lambdas.mean()) if self.steps else 0.0,
            "w_mean": float(self.weights.mean()) if self.steps else 0.0,
            "lambdas": [round(float(v), 6) for v in self.lambdas],
            "weights": [round(float(v), 6) for v in self.weights],
        }


# ---------------------------------------------------------------------------------------------- the rule (pure)
def entropy(logprobs: Any) -> Any:
    """Shannon entropy (nats) of each row of a log-prob tensor ``[..., V]`` (``0·log 0`` counted as 0)."""
    return -(logprobs.exp() * logprobs).nan_to_num().sum(-1)


def entropy_weight(h_para: Any, h_rag: Any, eps: float = ENTROPY_EPS) -> Any:
    """w_t = H_para / (H_para + H_rag + eps), and 0.5 where H_para + H_rag < eps (spec eq. 37, §7.4 [REC])."""
    import torch

    total = h_para + h_rag
    return torch.where(total > eps, h_para / (total + eps), torch.full_like(total, 0.5))


def contrastive_scores(lp_expert: Any, lp_amateur: Any, lam: Any) -> Any:
    """(1 + λ)·lp_expert − λ·lp_amateur per row (``lam`` one value per row); rows with λ = 0 are lp_expert exactly.

    NaN (e.g. −inf − −inf) becomes −inf, so a token impossible under both streams is never chosen.
    """
    import torch

    lam = lam.to(lp_expert.dtype)[..., None]
    mixed = lp_expert + lam * (lp_expert - lp_amateur)
    mixed = torch.where(lam == 0, lp_expert, mixed)
    return mixed.nan_to_num(nan=float("-inf"))


@dataclass
class StepChoice:
    """The decision of one decoding step for a batch of pairs (tensors, one entry per pair)."""

    tokens: Any
    lambdas: Any
    weights: Any
    expert_logprob: Any
    amateur_logprob: Any
    expert_entropy: Any
    amateur_entropy: Any

    def columns(self) -> list[list[float]]:
        """The seven columns as Python lists (one device → host copy)."""
        import torch

        stacked = torch.stack(
            [
                self.tokens.to(torch.float64),
                self.lambdas.double(),
                self.weights.double(),
                self.expert_logprob.double(),
                self.amateur_logprob.double(),
                self.expert_entropy.double(),
                self.amateur_entropy.double(),
            ]
        )
        return stacked.cpu().tolist()


def choose_tokens(
    expert_logits: Any, amateur_logits: Any, alphas: Any, para_is_expert: Any, *, dynamic: bool = True
) -> StepChoice:
    """The contrastive greedy choice for a batch of pairs from their next-token logits ``[B, V]`` (any float dtype).

    ``alphas`` [B] are the strengths α, ``para_is_expert`` [B] (bool) says which stream is the no-context one
    (for w_t). Log-probs and entropies are computed in float32.
    """
    import torch

    lp_e = torch.log_softmax(expert_logits.float(), dim=-1)
    lp_a = torch.log_softmax(amateur_logits.float(), dim=-1)
    h_e, h_a = entropy(lp_e), entropy(lp_a)
    if dynamic:
        h_para = torch.where(para_is_expert, h_e, h_a)
        h_rag = torch.where(para_is_expert, h_a, h_e)
        weights = entropy_weight(h_para, h_rag)
    else:
        weights = torch.ones_like(h_e)
    lambdas = alphas.to(weights.dtype) * weights
    tokens = contrastive_scores(lp_e, lp_a, lambdas).argmax(-1)
    return StepChoice(
        tokens=tokens,
        lambdas=lambdas,
        weights=weights,
        expert_logprob=lp_e.gather(-1, tokens[:, None])[:, 0],
        amateur_logprob=lp_a.gather(-1, tokens[:, None])[:, 0],
        expert_entropy=h_e,
        amateur_entropy=h_a,
    )


# ---------------------------------------------------------------------------------------------- engines
@dataclass
class _Pair:
    """One pair's inputs and its decoding record."""

    expert: str
    amateur: str
    ids_expert: list[int]
    ids_amateur: list[int]
    alpha: float
    para_is_expert: bool
    row: Any = None  # the generator's DecodingRow (tokens / finish / text)
    columns: list[list[float]] = field(default_factory=lambda: [[] for _ in range(6)])


def contrastive_generate(
    generator: Any,
    expert_prompts: Sequence[str],
    amateur_prompts: Sequence[str],
    alphas: float | Sequence[float],
    *,
    max_new_tokens: int,
    stop: Sequence[str] | None = ("\n",),
    dynamic: bool = True,
    parametric: str | Sequence[str] = "amateur",
    batched: bool = True,
) -> list[ContrastiveGeneration]:
    """Contrastive greedy decoding of each (expert, amateur) pair, both streams in ONE forward per step.

    ``alphas`` is one α for all pairs or one per pair (α ≥ 0); ``parametric`` names the no-context stream
    (``"amateur"``: relevant mode, ``"expert"``: noisy mode), one for all pairs or one per pair; ``stop`` strings
    end a sequence and cut its text (``None`` / ``()`` disables them); EOS ends it. Returns one
    :class:`ContrastiveGeneration` per pair, in input order. Prompts are rendered text, encoded and left-truncated
    exactly as :meth:`Generator.generate` does. ``batched=False`` runs the reference engine instead
    (:func:`sequential_contrastive_generate`: the same decoding with two forwards per step).
    """
    import torch

    experts, amateurs = list(expert_prompts), list(amateur_prompts)
    if len(experts) != len(amateurs):
        raise ValueError(f"{len(experts)} expert prompts but {len(amateurs)} amateur prompts")
    params = DecodingParams(max_new_tokens=max_new_tokens, temperature=0.0, stop=tuple(stop or ())).normalised()
    params.validate()
    alpha_list = [float(a) for a in _broadcast(alphas, len(experts), "alphas")]
    if any(not np.isfinite(a) or a < 0 for a in alpha_list):
        raise ValueError(f"alphas must be finite and >= 0, got {alpha_list}")
    streams = _broadcast(parametric, len(experts), "parametric")
    bad = sorted({s for s in streams if s not in STREAMS})
    if bad:
        raise ValueError(f"parametric must be 'expert' or 'amateur', got {bad}")
    if not experts:
        return []
    budget = generator.max_context - max_new_tokens
    if budget < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} leaves no room in max_context={generator.max_context}")
    pairs = [
        _Pair(e, a, generator.encode_prompt(e, budget), generator.encode_prompt(a, budget), alpha, s == "expert")
        for e, a, alpha, s in zip(experts, amateurs, alpha_list, streams, strict=True)
    ]
    order = sorted(range(len(pairs)), key=lambda i: max(len(pairs[i].ids_expert), len(pairs[i].ids_amateur)))
    size = generator.batch_size
    with torch.inference_mode():
        for start in range(0, len(order), size):
            chunk = [pairs[i] for i in order[start : start + size]]
            with generator.counter.timed("contrastive" if batched else "contrastive_sequential"):
                if batched:
                    _decode_batched(generator, chunk, params, dynamic)
                else:
                    _decode_sequential(generator, chunk, params, dynamic)
    return [_finalise(generator, p, params, dynamic) for p in pairs]


def sequential_contrastive_generate(
    generator: Any,
    expert_prompts: Sequence[str],
    amateur_prompts: Sequence[str],
    alphas: float | Sequence[float],
    **options: Any,
) -> list[ContrastiveGeneration]:
    """The reference engine: :func:`contrastive_generate` (the same arguments; ``max_new_tokens`` is required)
    decoding with two forwards per step, the expert batch then the amateur batch."""
    return contrastive_generate(generator, expert_prompts, amateur_prompts, alphas, **options, batched=False)


def _broadcast(value: Any, n: int, name: str) -> list[Any]:
    if isinstance(value, str | int | float):
        return [value] * n
    values = list(value)
    if len(values) != n:
        raise ValueError(f"{name}: expected one value or {n}, got {len(values)}")
    return values


def _pair_tensors(chunk: list[_Pair], device: Any) -> tuple[Any, Any]:
    import torch

    alphas = torch.tensor([p.alpha for p in chunk], dtype=torch.float32, device=device)
    para = torch.tensor([p.para_is_expert for p in chunk], dtype=torch.bool, device=device)
    return alphas, para


def _record(generator: Any, chunk: list[_Pair], active: list[int], choice: StepChoice, step: int, params):
    """Append the step's decision to every active pair.

    Returns ``(keep, tokens)``: the positions (in ``active``) of the pairs still running and the chosen token ids.
    """
    columns = choice.columns()
    tokens, rest = [int(t) for t in columns[0]], columns[1:]
    keep = []
    for k, p in enumerate(active):
        pair = chunk[p]
        token = tokens[k]
        pair.row.tokens.append(token)
        for column, values in zip(pair.columns, rest, strict=True):
            column.append(values[k])
        if not generator.finish_row(pair.row, token, step, params):
            keep.append(k)
    generator.counter.decoded_tokens += 2 * len(active)
    return keep, tokens


def _new_rows(chunk: list[_Pair]) -> None:
    for i, pair in enumerate(chunk):
        pair.row = DecodingRow(job=i, sample=0, generator=None)
        pair.columns = [[] for _ in range(6)]


def prefill_streams(generator: Any, expert_ids: list[list[int]], amateur_ids: list[list[int]], params: Any) -> Any:
    """The decoding state of 2B rows (the B experts, then the B amateurs) after encoding the prompts.

    A prompt with five passages is several times longer than the closed-book prompt it is contrasted with; one
    forward over all 2B rows would pad every short prompt to the long width and (where the forward is compute-bound,
    as on a CPU) cost about twice the expert prefill. So when the two streams' widths differ, each stream is encoded
    by a forward of its own, padded to its own width, and the two KV caches are joined into one (``join_states``);
    every decoding step after that is one forward of 2B rows. Equal widths, or a model whose cache cannot be joined
    (sliding-window layers: found out once per generator, by its first split prefill), take a single forward over
    the 2B rows.

    The amateurs are encoded by :func:`prefill_amateurs`: they continue the experts' cache over the prefix all 2B
    prompts share (the system prompt) when that saves more prefill tokens than the generator's own prefix reuse
    among the amateurs.
    """

    if max(map(len, expert_ids)) == max(map(len, amateur_ids)) or generator.joinable_cache is False:
        return generator.prefill(expert_ids + amateur_ids, params)
    experts = generator.prefill(expert_ids, params)
    generator.joinable_cache = joinable(experts)
    if generator.joinable_cache:
        return join_states(experts, prefill_amateurs(generator, experts, expert_ids, amateur_ids, params))
    return generator.prefill(expert_ids + amateur_ids, params)


def shared_prefix_length(expert_ids: list[list[int]], amateur_ids: list[list[int]]) -> int:
    """The number of leading tokens every expert and amateur prompt share, at most every amateur's length − 1 (an
    amateur continuing them keeps a token of its own, whose logits start its stream)."""

    first = expert_ids[0]
    length = min(len(ids) - 1 for ids in amateur_ids)
    for ids in [*expert_ids, *amateur_ids]:
        length = min(length, common_prefix_length(first, ids))
    return max(length, 0)


def prefill_amateurs(
    generator: Any, experts: Any, expert_ids: list[list[int]], amateur_ids: list[list[int]], params: Any
) -> Any:
    """The amateurs' decoding state, given the experts' (``experts``, rows in ``expert_ids`` order, joinable).

    Both streams' prompts begin with the same chat header and system prompt (D²-RAG: the answering prompt with and
    without its passages; the question comes after the context, so the shared part ends before it): 33 tokens of
    SmolLM2's 66-token closed-book prompt. When every prompt shares such a prefix (:func:`shared_prefix_length`)
    and the generator reuses prefixes (:meth:`~workbench.backends.generator.Generator.reuses_prefixes`), the
    amateurs continue the first expert row's keys and values of those tokens
    (:func:`~workbench.backends.prefix_reuse.row_prefix_cache`,
    :meth:`~workbench.backends.generator.Generator.prefill_continuing`): only their own tokens are forwarded (one
    forward, or on a CPU the chunks ``prefill`` would make), and no forward encodes the prefix. That is taken when it
    saves more prefill tokens than the generator's own prefix reuse among the amateurs would
    (:func:`~workbench.backends.prefix_reuse.plan_prefix_groups`: their longer common prefix, encoded once by a
    forward of its own): always for one pair, whose amateur has no other row to share with; else the amateurs are
    encoded by ``generator.prefill``. Either way every amateur row holds the keys, values and logits of its whole
    prompt (up to float rounding) and ``prefill_tokens`` counts every prompt token (the saving goes to
    ``prefix_reused_tokens``).
    """

    length = shared_prefix_length(expert_ids, amateur_ids)
    if length >= 1 and generator.reuses_prefixes(params):
        own = sum(group.saved for group in plan_prefix_groups(amateur_ids, generator.prefix_min_tokens))
        if length * len(amateur_ids) > own:
            head = row_prefix_cache(experts["cache"], experts["mask"], 0, length)
            return generator.prefill_continuing(head, length, amateur_ids, params)
    return generator.prefill(amateur_ids, params)


def _keep_pairs(
    keep: list[int], states: list[Any], alphas: Any, para: Any, active: list[int], tokens: list[int], stacked: bool
) -> tuple[list[Any], Any, Any, list[int], list[int]]:
    """Drop the finished pairs: only the pairs at positions ``keep`` (of the n active ones) go on decoding.

    Their rows are kept in every decoding state — with ``stacked``, one state whose rows are the n experts then the
    n amateurs (the batched engine); otherwise one state per stream (the sequential engine) — and in the per-pair
    α / stream tensors, the active list and this step's tokens. Returns ``(states, alphas, para, active, tokens)``.
    """
    import torch

    n = len(active)
    rows = torch.tensor(keep + [n + k for k in keep] if stacked else keep, dtype=torch.long)
    index = torch.tensor(keep, dtype=torch.long, device=alphas.device)
    return (
        [select_rows(state, rows) for state in states],
        alphas[index],
        para[index],
        [active[k] for k in keep],
        [tokens[k] for k in keep],
    )


def _decode_batched(generator: Any, chunk: list[_Pair], params: Any, dynamic: bool) -> None:
    """Rows 0..n-1 are the experts and rows n..2n-1 the amateurs of the n active pairs; one forward per step."""

    _new_rows(chunk)
    state = prefill_streams(generator, [p.ids_expert for p in chunk], [p.ids_amateur for p in chunk], params)
    state = reserve_positions(state, params.max_new_tokens - 1)  # steps write the 2n rows' KV in place
    generator.counter.lm_calls += 2 * len(chunk)  # prompts: both streams of every pair
    generator.counter.lm_batches += 1
    alphas, para = _pair_tensors(chunk, state["logits"].device)
    active = list(range(len(chunk)))
    for step in range(params.max_new_tokens):
        n = len(active)
        logits = state["logits"]
        choice = choose_tokens(logits[:n], logits[n:], alphas, para, dynamic=dynamic)
        keep, tokens = _record(generator, chunk, active, choice, step, params)
        if not keep:
            break
        if len(keep) < n:
            (state,), alphas, para, active, tokens = _keep_pairs(keep, [state], alphas, para, active, tokens, True)
        state = generator.step(state, tokens + tokens, params)


def _decode_sequential(generator: Any, chunk: list[_Pair], params: Any, dynamic: bool) -> None:
    """The same decisions with one state (and one forward per step) per stream."""

    _new_rows(chunk)
    expert = generator.prefill([p.ids_expert for p in chunk], params)
    amateur = generator.prefill([p.ids_amateur for p in chunk], params)
    generator.counter.lm_calls += 2 * len(chunk)
    generator.counter.lm_batches += 2
    alphas, para = _pair_tensors(chunk, expert["logits"].device)
    active = list(range(len(chunk)))
    for step in range(params.max_new_tokens):
        n = len(active)
        choice = choose_tokens(expert["logits"], amateur["logits"], alphas, para, dynamic=dynamic)
        keep, tokens = _record(generator, chunk, active, choice, step, params)
        if not keep:
            break
        if len(keep) < n:
            (expert, amateur), alphas, para, active, tokens = _keep_pairs(
                keep, [expert, amateur], alphas, para, active, tokens, False
            )
        expert = generator.step(expert, tokens, params)
        amateur = generator.step(amateur, tokens, params)


def _finalise(generator: Any, pair: _Pair, params: Any, dynamic: bool) -> ContrastiveGeneration:
    """Answer tokens and text by the generator's rules (EOS dropped, text cut before a stop string)."""
    row = pair.row
    tokens, text = generator.answer(row)
    arrays = [np.asarray(c, dtype=np.float32) for c in pair.columns]
    return ContrastiveGeneration(
        expert_prompt=pair.expert,
        amateur_prompt=pair.amateur,
        text=text,
        token_ids=np.asarray(tokens, dtype=np.int64),
        finish_reason=row.finish or "length",
        alpha=pair.alpha,
        parametric="expert" if pair.para_is_expert else "amateur",
        dynamic=dynamic,
        lambdas=arrays[0],
        weights=arrays[1],
        expert_logprobs=arrays[2],
        amateur_logprobs=arrays[3],
        expert_entropies=arrays[4],
        amateur_entropies=arrays[5],
        prompt_tokens=(len(pair.ids_expert), len(pair.ids_amateur)),
    )
