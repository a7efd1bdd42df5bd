"""The attributes every part of :class:`~workbench.backends.generator.Generator` works on.

The generator is one class assembled from parts by job (prompt jobs, prefill, the decoding loop, token choice,
recording, scoring); each part subclasses :class:`GeneratorState`, which names what the constructor sets, so a part
reads as a class of its own.
"""

from __future__ import annotations

from typing import Any

from workbench.backends.cost import CostCounter


class GeneratorState:
    """What :meth:`Generator.__init__ <workbench.backends.generator.Generator>` sets: the loaded model and tokenizer,
    where it runs, its batching limits, its cost counter, and what it learns while it runs (``joinable_cache``)."""

    model: Any
    tokenizer: Any
    device: str
    counter: CostCounter
    batch_size: int
    batch_rows: int
    max_context: int
    eos_ids: frozenset[int]
    prefix_reuse: bool
    prefix_min_tokens: int
    joinable_cache: bool | None
    _cache_arg: str
    _warned_truncation: bool
