"""Prefix reuse: rows of one forward that begin with the same tokens encode those tokens once.

:meth:`~workbench.backends.generator.Generator.prefill` (and the generator's teacher-forced reads) hand their rows to
:func:`plan_prefix_groups`, which finds groups of rows sharing a token prefix worth reusing. Each group's prefix is
encoded once at batch 1; its KV cache is copied to the group's rows (:func:`expand_cache`) and only each row's
suffix is forwarded, left-padded, with the attention mask and positions continuing the prefix
(:func:`continued_layout`): the mask is ``[1 … 1 (prefix) | 0 … 0 (padding) | 1 … 1 (suffix)]`` and the suffix's
positions start at the prefix length. The padding between the prefix and a row's suffix is a hole in the mask, never
attended to; since a decoding state carries explicit positions and mask, decoding goes on from such a row exactly as
from a row encoded whole. Rows of another forward that begin with tokens a decoding state already holds continue
that state's row instead: :func:`row_prefix_cache` cuts the row's prefix out and
:meth:`~workbench.backends.generator.Generator.prefill_continuing` forwards the suffixes over it (contrastive
decoding's second stream, whose prompt shares its system prompt with the first). This module holds the model-free
parts (the plan, the cache copy and cut, the layout); torch and transformers are imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "PREFIX_MIN_TOKENS",
    "REUSE_ATTENTION",
    "PrefixGroup",
    "common_prefix_length",
    "continued_layout",
    "expand_cache",
    "plan_prefix_groups",
    "row_prefix_cache",
]

PREFIX_MIN_TOKENS = 16
"""The shortest shared prefix worth a forward of its own: below it, the extra batch-1 forward (and the copy of its
cache) costs about what re-encoding the prefix in every row would (a chat template's system prompt is 20–40 tokens;
a few shared words are not worth it)."""

REUSE_ATTENTION = frozenset({"sdpa", "eager"})
"""The attention implementations prefix reuse runs under: they take an arbitrary padding mask, so the hole between
a prefix and a left-padded suffix is honoured. Flash / flex attention kernels read a padding mask as one contiguous
run per row, so reuse is off under them."""


@dataclass(frozen=True)
class PrefixGroup:
    """Rows (indices into the planned list) whose first ``length`` tokens are the same: encoded once for all."""

    rows: tuple[int, ...]
    length: int

    @property
    def saved(self) -> int:
        """The token-forwards reuse saves on this group: the prefix is encoded once instead of once per row."""
        return (len(self.rows) - 1) * self.length


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """The number of leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    for k in range(n):
        if a[k] != b[k]:
            return k
    return n


def plan_prefix_groups(
    id_lists: Sequence[Sequence[int]], min_prefix: int = PREFIX_MIN_TOKENS, min_suffix: int = 1
) -> list[PrefixGroup]:
    """The groups of rows whose shared prefix is worth reusing, saving the most token-forwards; rows in no group
    are encoded whole. Deterministic; groups are disjoint, each has at least two rows.

    A group's prefix is the longest prefix all its rows share, cut so that every row keeps at least ``min_suffix``
    tokens of its own (a decoding prefill needs one: the last token's logits; a teacher-forced read of the last k
    positions needs k); a group is formed only when that prefix holds at least ``min_prefix`` tokens. The rows are
    sorted lexicographically, where the rows sharing a prefix are contiguous and the prefix of a run is the minimum
    of its neighbours' common prefixes; a dynamic programme then splits the sorted rows into runs maximising the
    saved tokens (:attr:`PrefixGroup.saved`), fewer groups first on ties. One level only: a group does not nest
    shorter shared prefixes (the system prompt shared by every group is encoded once per group).
    """
    n = len(id_lists)
    if n < 2:
        return []
    order = sorted(range(n), key=lambda i: list(id_lists[i]))
    seqs = [list(id_lists[i]) for i in order]
    adjacent = [common_prefix_length(seqs[k], seqs[k + 1]) for k in range(n - 1)]
    caps = [len(seq) - min_suffix for seq in seqs]
    best: list[tuple[int, int]] = [(0, 0)] * (n + 1)  # (saved tokens, −groups) of the first `end` sorted rows
    choice: list[tuple[int, int]] = [(0, 0)] * (n + 1)  # (start of the last run, its prefix length; 0 = row alone)
    for end in range(1, n + 1):
        best[end], choice[end] = best[end - 1], (end - 1, 0)
        length = caps[end - 1]
        for start in range(end - 2, -1, -1):
            length = min(length, adjacent[start], caps[start])
            if length < max(min_prefix, 1):
                break
            candidate = (best[start][0] + (end - start - 1) * length, best[start][1] - 1)
            if candidate > best[end]:
                best[end], choice[end] = candidate, (start, length)
    groups: list[PrefixGroup] = []
    end = n
    while end > 0:
        start, length = choice[end]
        if length:
            groups.append(PrefixGroup(tuple(order[k] for k in range(start, end)), length))
        end = start
    return groups[::-1]


def expand_cache(cache: Any, rows: int) -> Any:
    """A new ``DynamicCache`` holding ``rows`` copies of the one-row ``cache``'s keys and values (every layer a
    plain full-attention layer: check with :func:`~workbench.backends.decoding_state.joinable`). The copies are
    independent tensors, so each group of rows grows its own cache."""
    from transformers.cache_utils import DynamicCache

    return DynamicCache(
        [(layer.keys.expand(rows, -1, -1, -1), layer.values.expand(rows, -1, -1, -1)) for layer in cache.layers]
    )


def continued_layout(suffixes: Sequence[Sequence[int]], prefix_length: int, pad_id: int) -> tuple[Any, Any, Any]:
    """``(input_ids, attention_mask, position_ids)`` for the ``suffixes`` of rows that continue one encoded prefix
    of ``prefix_length`` tokens: the suffixes left-padded (``input_ids`` [rows, S]); the mask over the prefix and
    the suffixes ([rows, prefix_length + S]: ones, then each suffix's padding mask); positions of the suffix tokens
    counted on from the prefix (``prefix_length`` + the position within the suffix; ``prefix_length`` on the
    padding, which is masked)."""
    import torch

    from workbench.backends.decoding_state import left_padded_batch

    input_ids, mask, positions = left_padded_batch(suffixes, pad_id)
    full = torch.cat([mask.new_ones((len(suffixes), prefix_length)), mask], dim=1)
    return input_ids, full, positions + prefix_length


def row_prefix_cache(cache: Any, mask: Any, row: int, length: int) -> Any:
    """A one-row ``DynamicCache`` of the keys and values of the first ``length`` real positions (mask 1) of row ``row``
    of a decoding state's cache (``cache``, ``mask``: every layer a plain full-attention layer, see
    :func:`~workbench.backends.decoding_state.joinable`): the KV cache of that row's first ``length`` tokens at
    positions 0 … ``length`` − 1, as every layout here counts a row's positions (left padding and the hole after a
    reused prefix are masked and skipped). Copies; the state is left as it is."""
    from transformers.cache_utils import DynamicCache

    index = mask[row].nonzero()[:length, 0].to(cache.layers[0].keys.device)
    if index.numel() < length:
        raise ValueError(f"row {row} holds {index.numel()} tokens, fewer than the {length} asked for")
    return DynamicCache(
        [
            (layer.keys[row : row + 1].index_select(2, index), layer.values[row : row + 1].index_select(2, index))
            for layer in cache.layers
        ]
    )
