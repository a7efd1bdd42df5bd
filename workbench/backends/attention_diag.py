"""LLM-Check's attention diagonal read while decoding: log A^h_pp of the last layer at each fed position p.

The ``attention_logdiag`` stat (D²-RAG paper eqs. 22–23) is the last layer's post-softmax attention weight that the
query at position p puts on its own key p, for every answer token. :func:`last_layer_logdiag` records it during
ordinary (SDPA or any other) forward passes, so a greedy decode gives it for the tokens it feeds, and a
teacher-forced pass (:func:`workbench.uncertainty.attention_stats.answer_attention_logdiag`, for answers decoded
without it) gives it for the answer tokens it reads.

How: while a recorder is open, the last decoder layer's attention module — only that module, of only that model —
sees a view of its config (:class:`_RecordingConfig`) whose attention implementation names a wrapper registered in
transformers' ``ALL_ATTENTION_FUNCTIONS`` under :data:`WRAPPER_KEY`, and only in the threads that opened a recorder
for it. The wrapper computes the attention scores of the layer's queries as eager attention does (q·kᵀ × scaling,
grouped key heads, the mask, an attention-logit softcap where the model passes one) in float32 and keeps, per query,
the log-softmax at its own key — the rightmost key its mask lets it see — then calls the model's own attention
function, whose output the layer returns untouched: decoding chooses the same tokens with the recorder on or off.
Every other model, and every other thread running this one, dispatches to transformers' attention directly; the
module's config and the registry are restored when the last recorder closes, on error too.

Memory: a recorder reads only the last ``queries`` queries of each forward (a decode step feeds one; the prefill's
prompt positions are never read), in blocks of query rows whose scores hold at most :data:`BLOCK_ELEMENTS` floats,
so its extra memory grows with the key count L, never with L² (the full float32 ``(batch, heads, L, L)`` scores of
an 8B-shape prefill, batch 8, 4k context, are ≈17 GB).
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

__all__ = [
    "BLOCK_ELEMENTS",
    "LOG_FLOOR",
    "WRAPPER_KEY",
    "LogDiagRecorder",
    "last_attention_module",
    "last_layer_logdiag",
    "own_key_index",
    "own_key_logprobs",
    "visible_keys",
]

LOG_FLOOR = math.log(1e-12)
"""Weights are floored at 1e-12 before the log, as the teacher-forced pass does."""

BLOCK_ELEMENTS = 1 << 22
"""The most float32 scores :func:`own_key_logprobs` holds at once (16 MiB; one query row more when a single row is
larger): queries are read in blocks of rows sized to it."""

WRAPPER_KEY = "workbench-logdiag"
"""The name the recording wrapper is registered under in ``ALL_ATTENTION_FUNCTIONS`` while a recorder is open: only a
recording module's config view names it."""


def last_attention_module(model: Any) -> Any | None:
    """The last decoder layer's attention module of ``model`` (the module with the highest ``layer_idx`` that has
    a ``scaling``), or None when the model's modules do not say (then nothing is recorded)."""
    best, index = None, -1
    for module in model.modules():
        layer = getattr(module, "layer_idx", None)
        if isinstance(layer, int) and hasattr(module, "scaling") and layer > index:
            best, index = module, layer
    return best


def own_key_logprobs(
    query: Any,
    key: Any,
    mask: Any,
    *,
    scaling: float,
    groups: int,
    softcap: float | None = None,
    queries: int | None = None,
    block_elements: int | None = BLOCK_ELEMENTS,
) -> Any:
    """log softmax(q·kᵀ × ``scaling`` + mask) at each query's own key, ``(batch, heads, n)`` float32, for the last
    ``n`` = ``queries`` queries (every query when None; fewer when the forward has fewer).

    ``query`` ``(B, H, Q, d)``; ``key`` ``(B, H / groups, K, d)``; ``mask`` transformers' attention mask for the
    layer — None (causal, every query i sees keys ≤ K − Q + i), boolean (True: visible) or additive float (0:
    visible), broadcastable to ``(B, 1, Q, K)``. A query's own key is the rightmost key it sees: decoding appends each
    fed token's key after every key it may see. Floored at :data:`LOG_FLOOR`.

    The queries are scored in blocks of rows holding at most ``block_elements`` scores (at least one row), so the
    extra memory is O(B·H·K) per block, not O(B·H·Q·K); ``block_elements=None`` scores them all in one block (the
    whole matrix)."""
    import torch

    batch, heads, n_q, dim = query.shape
    kv_heads, n_k = key.shape[1], key.shape[-2]
    first = 0 if queries is None else max(n_q - int(queries), 0)
    if first == n_q:
        return torch.empty(batch, heads, 0, dtype=torch.float32, device=query.device)
    keys = key.float().transpose(-1, -2)  # (B, Hkv, d, K): query head h reads key head h // groups
    rows = n_q - first if block_elements is None else max(1, int(block_elements) // max(batch * heads * n_k, 1))
    blocks = []
    for start in range(first, n_q, rows):
        stop = min(start + rows, n_q)
        count = stop - start
        q = query[:, :, start:stop].float().reshape(batch, kv_heads, groups * count, dim)
        scores = torch.matmul(q, keys).view(batch, heads, count, n_k).mul_(scaling)
        if softcap:
            scores.div_(softcap).tanh_().mul_(softcap)
        visible = visible_keys(mask, start, stop, n_q, n_k, scores.device)
        scores.masked_fill_(~visible, float("-inf"))
        own = own_key_index(visible)  # (B or 1, 1, count)
        picked = torch.gather(scores, -1, own.expand(batch, heads, count).unsqueeze(-1)).squeeze(-1)
        top = scores.amax(dim=-1, keepdim=True)
        top.masked_fill_(top.isinf(), 0.0)  # a query that sees no key (padding) stays NaN, as torch.logsumexp gives
        total = scores.sub_(top).exp_().sum(dim=-1).log_().add_(top.squeeze(-1))  # logsumexp, in place
        blocks.append((picked - total).clamp_min(LOG_FLOOR))
        del scores, visible, own
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=-1)


def visible_keys(mask: Any, start: int, stop: int, n_q: int, n_k: int, device: Any) -> Any:
    """Which of the ``n_k`` keys queries ``start`` … ``stop`` − 1 (of ``n_q``) see under ``mask`` (the forms
    :func:`own_key_logprobs` takes), boolean, broadcastable to ``(B, H, stop − start, n_k)``."""
    import torch

    if mask is None:
        columns = torch.arange(n_k, device=device)
        last = torch.arange(start, stop, device=device)[:, None] + (n_k - n_q)
        return (columns[None, :] <= last)[None, None]
    mask = mask[..., -n_q:, :n_k]
    if mask.shape[-2] != 1:  # a mask of one row is every query's
        mask = mask[..., start:stop, :]
    return mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2


def own_key_index(visible: Any) -> Any:
    """Each query's own key in ``visible`` (:func:`visible_keys`): the index of the last True along the key axis."""
    import torch

    return (visible.shape[-1] - 1) - torch.flip(visible.to(torch.int8), dims=[-1]).argmax(dim=-1)


class LogDiagRecorder:
    """What :func:`last_layer_logdiag` recorded: one ``(batch, heads, n)`` float32 array per forward of the last
    attention layer since the last :meth:`take` — ``n`` its last ``queries`` queries (all when None), computed by
    ``score`` (:func:`own_key_logprobs`' signature). ``active`` is False when the model could not be wrapped."""

    def __init__(self, active: bool, queries: int | None = None, score: Callable[..., Any] | None = None) -> None:
        self.active = active
        self.queries = queries
        self.score = score or own_key_logprobs
        self._forwards: list[np.ndarray] = []

    def add(self, logdiag: Any) -> None:
        """Record one forward's log diagonal (a tensor)."""
        self._forwards.append(logdiag.detach().cpu().numpy())

    def take(self) -> list[np.ndarray]:
        """The forwards recorded since the last call, oldest first; clears them."""
        out, self._forwards = self._forwards, []
        return out


def _eager_function(module: Any) -> Any | None:
    """The modeling file's own ``eager_attention_forward`` for ``module`` (what the ``eager`` mode calls)."""
    return getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)


_LOCK = threading.Lock()
_RECORDERS: dict[tuple[int, int], LogDiagRecorder] = {}
"""(thread, id of a last attention module) → its recorder: a forward records into the recorder its own thread
opened for that module, so models and threads decoding at the same time never mix their diagonals."""
_SCOPES: dict[int, list[Any]] = {}
"""id of a recording module → ``[module, its own config, recorders open on it]``: the module sees a
:class:`_RecordingConfig` while the count is above 0."""
_CALLING = threading.local()
"""``depth`` > 0 while this thread's wrapper runs the model's own attention function (which may read the
implementation's name from the module's config again, as the flash kernels do)."""


class _RecordingConfig:
    """A recording attention module's config: the module's own config in every attribute (reads and writes go to
    it), except ``_attn_implementation``, which names :data:`WRAPPER_KEY` for a thread that opened a recorder for the
    module (and is not inside the wrapper's call of the real function) and the real implementation otherwise."""

    def __init__(self, config: Any, module_id: int) -> None:
        object.__setattr__(self, "_own", config)
        object.__setattr__(self, "_module_id", module_id)

    @property
    def _attn_implementation(self) -> Any:
        if getattr(_CALLING, "depth", 0) == 0 and (threading.get_ident(), self._module_id) in _RECORDERS:
            return WRAPPER_KEY
        return self._own._attn_implementation

    @_attn_implementation.setter
    def _attn_implementation(self, value: Any) -> None:
        self._own._attn_implementation = value

    def __getattr__(self, name: str) -> Any:
        own = self.__dict__.get("_own")
        if own is None:  # a copy being built without __init__ (copy, pickle): no recursion through _own
            raise AttributeError(name)
        return getattr(own, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._own, name, value)


def _recording_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
    """The attention function :data:`WRAPPER_KEY` names: the module's own attention function (its config's real
    implementation), plus the log diagonal of the queries this thread's recorder for ``module`` reads."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    recorder = _RECORDERS.get((threading.get_ident(), id(module)))
    if recorder is not None:
        scaling = kwargs.get("scaling")
        recorder.add(
            recorder.score(
                query,
                key,
                attention_mask,
                scaling=float(scaling if scaling is not None else query.shape[-1] ** -0.5),
                groups=int(getattr(module, "num_key_value_groups", 1) or 1),
                softcap=kwargs.get("softcap"),
                queries=recorder.queries,
            )
        )
    _CALLING.depth = getattr(_CALLING, "depth", 0) + 1
    try:
        implementation = module.config._attn_implementation  # the real one, inside the call
        if implementation in (None, "eager"):
            function = _eager_function(module)
        else:
            function = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, _eager_function(module))
        return function(module, query, key, value, attention_mask, **kwargs)
    finally:
        _CALLING.depth -= 1


@contextmanager
def last_layer_logdiag(
    model: Any, *, queries: int | None = None, score: Callable[..., Any] | None = None
) -> Iterator[LogDiagRecorder]:
    """Record log A^h_pp of ``model``'s last attention layer at the last ``queries`` queries (all when None) of
    every forward this thread runs inside the context (see the module docstring); the layer's outputs are unchanged.
    ``score`` computes it (default :func:`own_key_logprobs`; bench-features passes its reference of the recorder
    before it read in blocks, to measure that memory).
    Yields an inactive recorder (nothing recorded) when the last attention module, its config or its attention
    function cannot be found. Raises ``RuntimeError`` when this thread already has a recorder open for the model.

    Only that module of ``model`` dispatches to the recording wrapper, and only in this thread (and in others that
    open their own recorder for it); its config is restored when the last recorder on it closes, and the wrapper's
    registry entry when the last recorder in the process closes, on error too."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    target = last_attention_module(model)
    config = getattr(target, "config", None)
    implementation = getattr(config, "_attn_implementation", None) or "eager"
    found = _eager_function(target) if implementation == "eager" else ALL_ATTENTION_FUNCTIONS.get(implementation)
    if target is None or config is None or found is None:
        yield LogDiagRecorder(False)
        return
    recorder, slot = LogDiagRecorder(True, queries, score), (threading.get_ident(), id(target))
    with _LOCK:
        if slot in _RECORDERS:
            raise RuntimeError("a recorder is already open for this model in this thread")
        if not _SCOPES:
            ALL_ATTENTION_FUNCTIONS[WRAPPER_KEY] = _recording_attention  # the instance's own mapping: removed below
        scope = _SCOPES.get(id(target))
        if scope is None:
            scope = _SCOPES[id(target)] = [target, config, 0]
            target.config = _RecordingConfig(config, id(target))
        scope[2] += 1
        _RECORDERS[slot] = recorder
    try:
        yield recorder
    finally:
        with _LOCK:
            del _RECORDERS[slot]
            scope[2] -= 1
            if scope[2] == 0:
                del _SCOPES[id(target)]
                target.config = scope[1]
            if not _SCOPES:
                ALL_ATTENTION_FUNCTIONS._local_mapping.pop(WRAPPER_KEY, None)
