"""The decoding state of a batch of rows, and the tensor layout every batched forward shares.

A decoding *state* is a dict: ``"cache"`` (the KV cache), ``"mask"`` (attention mask [rows, width]), ``"next_pos"``
(the position of each row's next token [rows, 1]) and ``"logits"`` (the last position's logits [rows, V]), plus
``"hidden"`` / ``"attn"`` when the decoding parameters ask for them. :class:`~workbench.backends.generator.Generator`
makes and advances one (``prefill`` → ``step``); this module holds what works on it without the model: the
left-padded batch layout (:func:`left_padded_batch`), keeping or repeating rows (:func:`select_rows`), joining
separately prefilled states (:func:`joinable`, :func:`join_states`), reserving room in a state's KV cache for the
positions decoding will add (:func:`reserve_positions`), the parts of a forward's output a state keeps, and
:class:`DecodingRow`, the record of one decoded sequence. torch is imported inside the functions."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.backends.generation_types import DecodingParams

__all__ = [
    "DecodingRow",
    "cache_argument",
    "forward_outputs",
    "join_states",
    "joinable",
    "left_padded_batch",
    "record_extras",
    "reserve_positions",
    "returned_cache",
    "select_rows",
]


@dataclass
class DecodingRow:
    """The record of one decoded sequence (one row of a decoding batch), filled step by step.

    ``job`` / ``sample`` say which prompt and sample it is (free for other decoders to use as they like);
    ``generator`` is its sampling RNG (None for greedy). ``tokens`` are every token chosen so far, the terminating one
    included; the decoding loop appends to ``raw`` / ``processed`` / ``entropy`` (and ``top_ids`` / ``top_lps``,
    ``hidden`` / ``attn``; ``own_attention``: the last layer's log attention diagonal at each token it fed) as it
    goes; :meth:`Generator.finish_row` sets ``finish`` ("eos", "stop", "length") and, for a stop string, ``text``.
    """

    job: int
    sample: int
    generator: Any  # torch.Generator | None
    tokens: list[int] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)
    processed: list[float] = field(default_factory=list)
    entropy: list[float] = field(default_factory=list)
    top_ids: list[np.ndarray] = field(default_factory=list)
    top_lps: list[np.ndarray] = field(default_factory=list)
    hidden: list[np.ndarray] = field(default_factory=list)
    attn: list[np.ndarray] = field(default_factory=list)
    own_attention: list[np.ndarray | None] = field(default_factory=list)
    finish: str | None = None
    text: str = ""


def left_padded_batch(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any, Any]:
    """``(input_ids, attention_mask, position_ids)`` long tensors for token-id lists as one left-padded batch: each row
    right-aligned, padding masked out, positions counted from each row's first real token (0 on the padding). The
    one layout every forward over a batch of prompts uses (decoding, scoring, the features' teacher-forced reads)."""
    import torch

    width = max(len(seq) for seq in seqs)
    input_ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for b, seq in enumerate(seqs):
        input_ids[b, width - len(seq) :] = torch.tensor(list(seq), dtype=torch.long)
        mask[b, width - len(seq) :] = 1
    return input_ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def forward_outputs(out: Any, params: DecodingParams) -> dict[str, Any]:
    """The parts of a forward output the decoding loop keeps: last logits, chosen hidden layer, attention diag."""
    state = {"logits": out.logits[:, -1, :]}
    if params.hidden_layer is not None:
        state["hidden"] = out.hidden_states[params.hidden_layer][:, -1, :]
    if params.attentions:
        # (batch, layers, heads): the last query position's weight on itself
        import torch

        state["attn"] = torch.stack([a[:, :, -1, -1] for a in out.attentions], dim=1)
    return state


def cache_argument(model: Any) -> str:
    """The forward keyword for the KV cache: ``cache`` in newer transformers (``past_key_values`` is deprecated
    there, removal announced for 5.40), ``past_key_values`` in older ones and in remote-code models."""

    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"


def returned_cache(out: Any) -> Any:
    """The KV cache a forward returned, under either of its names."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def select_rows(state: dict[str, Any], index: Any) -> dict[str, Any]:
    """Keep (or repeat) rows ``index`` (a long tensor) of a decoding state, the KV cache included (in place)."""
    index = index.to(state["mask"].device)
    state["cache"].batch_select_indices(index)
    out = {"cache": state["cache"]}
    for name, value in state.items():
        if name != "cache":
            out[name] = value[index.to(value.device)]
    return out


def joinable(state: dict[str, Any]) -> bool:
    """Whether ``state``'s KV cache can be joined with another by :func:`join_states`: a plain dynamic cache whose
    every layer holds full-attention keys for all the state's positions (no sliding-window or special layers)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    cache, width = state["cache"], state["mask"].shape[1]
    return type(cache) is DynamicCache and all(
        type(layer) is DynamicLayer and layer.keys is not None and layer.keys.shape[-2] == width
        for layer in cache.layers
    )


def join_states(first: dict[str, Any], *others: dict[str, Any]) -> dict[str, Any]:
    """One decoding state holding the rows of ``first`` then those of each of ``others`` (all :func:`joinable`).

    Each state was prefilled on its own, left-padded to its own width. The narrower ones are left-padded further (zero
    keys and values, mask 0, so the new positions are never attended to) and all are stacked along the batch in one
    concatenation per layer. Rotary positions are already applied to the cached keys and ``next_pos`` is per row, so
    every row decodes as it would alone. ``first``'s cache object is reused.
    """
    import torch

    states = (first, *others)
    caches = [state["cache"] for state in states]
    if any(
        set(state) != set(first) or len(cache.layers) != len(caches[0].layers)
        for state, cache in zip(states, caches, strict=True)
    ):
        raise ValueError("decoding states of different models or settings cannot be joined")
    width = max(state["mask"].shape[1] for state in states)

    def left_pad(tensor: Any, dim: int) -> Any:
        missing = width - tensor.shape[dim]
        if missing == 0:
            return tensor
        shape = list(tensor.shape)
        shape[dim] = missing
        return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)

    for layers in zip(*(cache.layers for cache in caches), strict=True):
        layers[0].keys = torch.cat([left_pad(layer.keys, -2) for layer in layers], dim=0)
        layers[0].values = torch.cat([left_pad(layer.values, -2) for layer in layers], dim=0)
    joined = {"cache": caches[0], "mask": torch.cat([left_pad(state["mask"], 1) for state in states])}
    for name in first:
        if name not in joined:
            joined[name] = torch.cat([state[name] for state in states], dim=0)
    return joined


def reserve_positions(state: dict[str, Any], positions: int) -> dict[str, Any]:
    """Give ``state``'s KV cache room for ``positions`` more positions, so that decoding steps write their keys and
    values in place instead of copying the whole cache at every step (in place; returns ``state``).

    Only a :func:`joinable` cache (plain full-attention layers) is changed: its layers become
    :class:`~workbench.backends.reserved_cache.ReservedLayer` holding the same tensors (nothing is copied now; the
    first step copies the cache into buffers with the room, as a plain layer's step would copy it anyway). Any other
    cache is left as it is. The keys and values stay exactly those of a plain cache, so decoding is unchanged;
    :func:`select_rows` keeps rows with their room. A reserved cache is no longer :func:`joinable`: join first.
    """
    if positions < 1 or not joinable(state):
        return state
    from workbench.backends.reserved_cache import ReservedLayer

    cache = state["cache"]
    cache.layers = [ReservedLayer(layer.keys, layer.values, positions) for layer in cache.layers]
    return state


def record_extras(rows: list[DecodingRow], active: list[int], state: dict[str, Any], params: DecodingParams) -> None:
    """Append the current step's hidden state / attention diagonal to each active row."""
    if params.hidden_layer is not None:
        hidden = state["hidden"].float().cpu().numpy()
        for k, r in enumerate(active):
            rows[r].hidden.append(hidden[k])
    if params.attentions:
        attn = state["attn"].float().cpu().numpy()
        for k, r in enumerate(active):
            rows[r].attn.append(attn[k])
