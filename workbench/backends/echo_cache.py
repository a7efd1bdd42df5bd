"""The KV caches of recently echoed sequences, kept across calls so that a later echo continuing one re-encodes only
what is new (what vLLM's automatic prefix caching and llama.cpp's slot caches do for their prompts).

``serve-model`` answers an option read that is outside the top k by teacher forcing — an echo of the prompt + the
option — one request after echoing the prompt itself: without this cache the whole prompt is encoded twice.
:class:`EchoCache` keeps, per echoed sequence, its one-row KV cache (positions 0 … L − 1) and its own log-probs
(:class:`~workbench.backends.generation_types.PromptLogprobs`); :meth:`Scoring.prompt_logprobs
<workbench.backends.generator.scoring.Scoring.prompt_logprobs>` continues a sequence that shares at least the
reuse minimum with a kept one from their last shared token but one (that token is fed again: its logits predict the
first token that differs), taking the log-probs before it from the kept entry. Equal to encoding the sequence whole
up to float rounding. Bounded by the tokens it holds, least recently used out first; thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from workbench.backends.generation_types import PromptLogprobs
from workbench.backends.prefix_reuse import common_prefix_length

__all__ = ["EchoCache", "EchoEntry"]


@dataclass(frozen=True)
class EchoEntry:
    """One echoed sequence: its token ids, its one-row KV cache (every position) and its own log-probs, top lists of
    ``width`` entries."""

    ids: tuple[int, ...]
    kv: Any
    logprobs: PromptLogprobs

    @property
    def width(self) -> int:
        """The alternatives kept per position."""
        return int(self.logprobs.top_ids.shape[1])


class EchoCache:
    """Echoed sequences' KV caches and log-probs, at most ``max_tokens`` tokens held (a longer sequence is not kept);
    :meth:`lookup` finds the entry sharing the longest prefix with a sequence, :meth:`put` keeps one."""

    def __init__(self, max_tokens: int) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[int, ...], EchoEntry] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def held_tokens(self) -> int:
        """The tokens the kept entries hold together."""
        return self._held

    def lookup(self, ids: list[int], min_shared: int, width: int) -> tuple[EchoEntry, int] | None:
        """``(entry, shared)``: the kept entry sharing the longest prefix with ``ids`` (``shared`` tokens, at least
        ``min_shared`` and 2) among those with at least ``width`` alternatives per position; None when there is
        none. The entry found becomes the most recently used."""
        best: tuple[EchoEntry, int] | None = None
        with self._lock:
            for entry in self._entries.values():
                if entry.width < width:
                    continue
                shared = common_prefix_length(entry.ids, ids)
                if shared >= max(min_shared, 2) and (best is None or shared > best[1]):
                    best = (entry, shared)
            if best is not None:
                self._entries.move_to_end(best[0].ids)
                self.hits += 1
        return best

    def put(self, ids: list[int], kv: Any, logprobs: PromptLogprobs) -> None:
        """Keep ``ids`` with its one-row KV cache and own log-probs (replacing an entry of the same ids), then drop
        the least recently used entries until at most :attr:`max_tokens` tokens are held."""
        key = tuple(int(i) for i in ids)
        if len(key) > self.max_tokens:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._held -= len(old.ids)
            self._entries[key] = EchoEntry(key, kv, logprobs)
            self._held += len(key)
            while self._held > self.max_tokens:
                _, dropped = self._entries.popitem(last=False)
                self._held -= len(dropped.ids)
