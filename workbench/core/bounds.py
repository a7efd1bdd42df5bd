"""Upper bounds of the counts a recipe or a bundle may set, one per kind of quantity, and the checks that apply them.

A bundle carries every method's options and the stats settings its features were collected with; the runtime runs
whatever they say. Without an upper bound a hand-edited ``standard_rag.k: 1000000`` gave 8,178-token prompts and a
minute a question, and ``samples`` or ``candidates`` of 10^9 loaded. Each setting's owner (a method's settings
class, :class:`~workbench.uncertainty.stat_settings.StatSettings`, the manifest schema) checks its numbers against
these bounds — the same check for a recipe and for a bundle. Each bound lies far past any real use (the defaults
are 3 to 50 passages, 5 to 10 samples, 16 to 256 new tokens) and near enough that no value within it makes one
question cost more than a large, real configuration.
"""

from __future__ import annotations

import math
from typing import Any

from workbench.core.errors import ConfigError

PASSAGES = 100
"""Passages or chunks placed in one prompt, or kept per query."""

POOL = 1000
"""Candidates retrieved or ranked per question before they are cut down (pools, per-path and per-channel top-N)."""

SAMPLES = 100
"""Sampled answers, paraphrases or self-check ideas per question."""

NEW_TOKENS = 32_768
"""Tokens one generation may produce (also a window length or a repair budget in tokens)."""

ROUNDS = 100
"""Rounds, iterations or follow-up queries of a method's loop."""

CHARS = 1_000_000
"""Characters of a chunk or passage."""

TEMPERATURE = 10.0
"""Sampling temperature (softmax(logits / T) is uniform long before this)."""

SEED = 2**32 - 1
"""Largest seed (numpy's and torch's seeds are 32-bit)."""


def shown(value: Any) -> str:
    """``value`` as a short, safe text for an error message (a 5,000-digit integer is not printed whole)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        return "a number with more than 18 digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def check_int(value: Any, name: str, where: str, high: int, low: int = 1, *, optional: bool = False) -> None:
    """ConfigError at ``where`` unless ``value`` is an integer in ``[low, high]`` (or None when ``optional``)."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        none = "None or " if optional else ""
        raise ConfigError(f"{name} must be {none}an integer >= {low}, got {shown(value)}", where)
    if value > high:
        raise ConfigError(f"{name} must be at most {high}, got {shown(value)}", where)


def check_counts(settings: Any, bounds: dict[str, int], prefix: str) -> None:
    """:func:`check_int` (from 1) on each integer field of ``settings`` that ``bounds`` names, against its upper
    bound; the error at ``<prefix>.<field>``."""
    for name, high in bounds.items():
        check_int(getattr(settings, name), name, f"{prefix}.{name}", high)


def check_number(value: Any, name: str, where: str, low: float, high: float, *, above: bool = False) -> None:
    """ConfigError at ``where`` unless ``value`` is a finite number in ``[low, high]`` (``(low, high]`` when
    ``above``)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a number (finite), got {shown(value)}", where)
    if value < low or (above and value == low) or value > high:
        interval = f"({low:g}, {high:g}]" if above else f"[{low:g}, {high:g}]"
        raise ConfigError(f"{name} must be in {interval}, got {shown(value)}", where)
