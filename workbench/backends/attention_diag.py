"""LLM-Check's attention diagonal read while decoding: log A^h_pp of the last layer at each fed position p.

The ``attention_logdiag`` stat (D²-RAG paper eqs. 22–23) is the last layer's post-softmax attention weight that the
query at position p puts on its own key p, for every answer token. :func:`last_layer_logdiag` records it during
ordinary (SDPA or any other) forward passes, so a greedy decode gives it for the tokens it feeds, instead of a
second, teacher-forced pass over prompt + answer with eager attention in every layer
(:func:`workbench.uncertainty.attention_stats.answer_attention_logdiag`, kept for answers decoded without it).

How: while the context is open, the model's attention function (transformers' ``ALL_ATTENTION_FUNCTIONS`` entry for
``config._attn_implementation``) is wrapped; for the last decoder layer's attention module only, the wrapper also
computes the attention scores of the layer's queries as eager attention does (q·kᵀ × scaling, grouped key heads
repeated, the mask, an attention-logit softcap where the model passes one) in float32 and keeps, per query, the
log-softmax at its own key — the rightmost key its mask lets it see. The layer's output is the wrapped function's,
untouched: decoding chooses the same tokens with the recorder on or off.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

__all__ = ["LOG_FLOOR", "LogDiagRecorder", "last_attention_module", "last_layer_logdiag", "own_key_logprobs"]

LOG_FLOOR = math.log(1e-12)
"""Weights are floored at 1e-12 before the log, as the teacher-forced pass does."""


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
    query: Any, key: Any, mask: Any, *, scaling: float, groups: int, softcap: float | None = None
) -> Any:
    """log softmax(q·kᵀ × ``scaling`` + mask) at each query's own key, ``(batch, heads, queries)`` float32.

    ``query`` ``(B, H, Q, d)``; ``key`` ``(B, H / groups, K, d)``; ``mask`` transformers' attention mask for the
    layer — None (causal, every query i sees keys ≤ K − Q + i), boolean (True: visible) or additive float (0:
    visible), broadcastable to ``(B, 1, Q, K)``. A query's own key is the rightmost key it sees: decoding appends each
    fed token's key after every key it may see. Floored at :data:`LOG_FLOOR`."""
    import torch

    q, k = query.float(), key.float()
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scaling
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    n_q, n_k = scores.shape[-2], scores.shape[-1]
    if mask is None:
        columns = torch.arange(n_k, device=scores.device)
        rows = torch.arange(n_q, device=scores.device)[:, None] + (n_k - n_q)
        visible = (columns[None, :] <= rows)[None, None]
    else:
        mask = mask[..., -n_q:, :n_k]
        visible = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    visible = visible.expand(scores.shape[0], 1, n_q, n_k)
    scores = scores.masked_fill(~visible, float("-inf"))
    # the rightmost visible key of each query: the last True along the key axis
    own = (n_k - 1) - torch.flip(visible.to(torch.int8), dims=[-1]).argmax(dim=-1)  # (B, 1, Q)
    own = own.unsqueeze(-1).expand(scores.shape[0], scores.shape[1], n_q, 1)
    picked = torch.gather(scores, -1, own).squeeze(-1)
    return (picked - torch.logsumexp(scores, dim=-1)).clamp_min(LOG_FLOOR)


class LogDiagRecorder:
    """What :func:`last_layer_logdiag` recorded: one ``(batch, heads, queries)`` float32 array per forward of the
    last attention layer since the last :meth:`take`. ``active`` is False when the model could not be wrapped."""

    def __init__(self, active: bool) -> None:
        self.active = active
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
_INSTALLED: dict[str, list[Any]] = {}
"""Per attention implementation wrapped: ``[users, whether transformers held a local override, that override]``."""
_RECORDERS: dict[tuple[int, int], LogDiagRecorder] = {}
"""(thread, id of a last attention module) → its recorder: a forward records into the recorder its own thread
opened for that module, so models and threads decoding at the same time never mix their diagonals."""


def _wrapper(implementation: str) -> Any:
    """The attention function installed for ``implementation``: the original one, plus the diagonal of a module
    some recorder of this thread waits for."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    original = None if implementation == "eager" else ALL_ATTENTION_FUNCTIONS.get(implementation)

    def wrapped(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
        recorder = _RECORDERS.get((threading.get_ident(), id(module)))
        if recorder is not None:
            scaling = kwargs.get("scaling")
            recorder.add(
                own_key_logprobs(
                    query,
                    key,
                    attention_mask,
                    scaling=float(scaling if scaling is not None else query.shape[-1] ** -0.5),
                    groups=int(getattr(module, "num_key_value_groups", 1) or 1),
                    softcap=kwargs.get("softcap"),
                )
            )
        function = original if original is not None else _eager_function(module)
        return function(module, query, key, value, attention_mask, **kwargs)

    return wrapped


@contextmanager
def last_layer_logdiag(model: Any) -> Iterator[LogDiagRecorder]:
    """Record log A^h_pp of ``model``'s last attention layer at every query of every forward this thread runs
    inside the context (see the module docstring); the layer's outputs are unchanged. Yields an inactive recorder
    (nothing recorded) when the last attention module or its attention function cannot be found.

    The wrapper is installed in transformers' ``ALL_ATTENTION_FUNCTIONS`` while any recorder of that implementation
    is open (counted; the previous entry restored by the last to close, on error too) and records only for the
    modules and threads that opened one."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    target = last_attention_module(model)
    implementation = getattr(model.config, "_attn_implementation", None) or "eager"
    found = _eager_function(target) if implementation == "eager" else ALL_ATTENTION_FUNCTIONS.get(implementation)
    if target is None or found is None:
        yield LogDiagRecorder(False)
        return
    recorder, slot = LogDiagRecorder(True), (threading.get_ident(), id(target))
    local = ALL_ATTENTION_FUNCTIONS._local_mapping  # transformers' per-instance overrides (GeneralInterface)
    with _LOCK:
        if slot in _RECORDERS:
            raise RuntimeError("a recorder is already open for this model in this thread")
        entry = _INSTALLED.get(implementation)
        if entry is None:
            entry = _INSTALLED[implementation] = [0, implementation in local, local.get(implementation)]
            ALL_ATTENTION_FUNCTIONS[implementation] = _wrapper(implementation)
        entry[0] += 1
        _RECORDERS[slot] = recorder
    try:
        yield recorder
    finally:
        with _LOCK:
            del _RECORDERS[slot]
            entry[0] -= 1
            if entry[0] == 0:
                del _INSTALLED[implementation]
                if entry[1]:
                    local[implementation] = entry[2]
                else:
                    local.pop(implementation, None)
