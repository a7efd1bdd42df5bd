"""A KV cache layer with room reserved for the positions decoding will add: each step writes in place.

transformers' ``DynamicLayer`` appends a step's keys and values with ``torch.cat``, which copies the layer's whole
cache at every step: with a batch of wide rows (contrastive decoding's amateur rows are left-padded to the width of
the expert's five-passage prompt) that copy is a large share of a CPU decoding step (2 rows × ~550 positions of
SmolLM2, one thread: the step took 1.27× a 1-row step, and 1.07× with the room reserved). :class:`ReservedLayer`
keeps the keys and values in buffers ``room`` positions wider than the cache, so a step writes its new positions
into the buffer and the layer's ``keys`` / ``values`` become views of the buffer's filled part: no copy. The values
are exactly those a ``DynamicLayer`` would hold (the same tensors, written elsewhere), so decoding is unchanged.

Use :func:`workbench.backends.decoding_state.reserve_positions` to give a decoding state's cache the room; this
module imports torch and transformers at import time and is loaded only by that function.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer

__all__ = ["ReservedLayer"]


class ReservedLayer(DynamicLayer):
    """A full-attention cache layer holding ``keys`` / ``values`` [rows, heads, positions, dim] as the filled part of
    buffers with ``room`` more positions.

    The buffers are made lazily, by the first :meth:`update` (which copies the cache once, as ``DynamicLayer``'s
    concatenation would have); later updates write in place while the room lasts. ``room`` counts the positions
    still expected and shrinks as they come; an update past it (or after anything replaced ``keys``, e.g.
    offloading) makes new buffers with the current cache and the update's positions, then room again for whatever
    is still expected (none: it then behaves as ``DynamicLayer``, one copy per update). Keeping rows
    (:meth:`batch_select_indices`) selects them from the buffers, room included.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, room: int) -> None:
        super().__init__()
        self.keys, self.values = keys, values
        self.device = keys.device
        self.is_initialized = True
        self.room = max(int(room), 0)
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def _holds(self, length: int) -> bool:
        """Whether ``keys`` / ``values`` are still the filled part of the buffers and ``length`` positions fit."""
        buffers = (self._key_buffer, self._value_buffer)
        if buffers[0] is None or buffers[1] is None or length > buffers[0].shape[-2]:
            return False
        return all(
            view.data_ptr() == buffer.data_ptr()
            and view.shape[:2] == buffer.shape[:2]
            and view.stride() == buffer.stride()
            for view, buffer in zip((self.keys, self.values), buffers, strict=True)
        )

    def _adopt(self, length: int) -> None:
        """New buffers of ``length`` + ``room`` positions holding the current cache."""
        filled = self.keys.shape[-2]
        buffers = []
        for tensor in (self.keys, self.values):
            rows, heads, _, dim = tensor.shape
            buffer = tensor.new_empty((rows, heads, length + self.room, dim))
            buffer[:, :, :filled] = tensor
            buffers.append(buffer)
        self._key_buffer, self._value_buffer = buffers

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new positions after the cached ones; return the keys and values of every position."""
        filled, new = self.keys.shape[-2], key_states.shape[-2]
        self.room = max(self.room - new, 0)
        if not self._holds(filled + new):
            self._adopt(filled + new)
        assert self._key_buffer is not None and self._value_buffer is not None
        self._key_buffer[:, :, filled : filled + new] = key_states
        self._value_buffer[:, :, filled : filled + new] = value_states
        self.keys = self._key_buffer[:, :, : filled + new]
        self.values = self._value_buffer[:, :, : filled + new]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep (or repeat) rows ``indices``, in the buffers (with their room) when the layer has them."""
        if not self._holds(self.keys.shape[-2]):
            super().batch_select_indices(indices)
            return
        assert self._key_buffer is not None and self._value_buffer is not None
        filled = self.keys.shape[-2]
        self._key_buffer = self._key_buffer[indices, ...]
        self._value_buffer = self._value_buffer[indices, ...]
        self.keys = self._key_buffer[:, :, :filled]
        self.values = self._value_buffer[:, :, :filled]
