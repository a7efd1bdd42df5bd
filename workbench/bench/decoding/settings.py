"""The 'bench_decoding' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView, check_own_section


@dataclass
class BenchDecodingSection:
    """The 'bench_decoding' stage: contrastive decoding (both streams in one batched forward) vs plain greedy vs two
    sequential decoders."""

    split: str = doc("split the questions come from", "test")
    batch_sizes: list[int] = doc("pairs decoded at once; one measurement per size", [1, 4, 8])
    max_new_tokens: int = doc("tokens decoded per answer (stop strings are ignored so every variant runs them all)", 16)
    repeats: int = doc("timing repeats after one warm-up, in rotated order (median and min-max reported)", 3)
    min_seconds: float = doc(
        "more rounds (up to 10 x repeats) while a batch size's timed rounds took less than this many seconds in all:"
        " short measurements are the noisy ones",
        60.0,
    )
    alpha: float = doc("contrast strength α", 1.0)
    k: int = doc("passages in the expert (with-context) prompt", 5)
    passage_chars: int = doc("each passage is cut to this many characters", 400)
    target_ratio: float = doc("target: batched contrastive time / greedy time at most this", 1.3)
    ignore_eos: bool = doc(
        "decode every answer to max_new_tokens even past EOS, so every variant does the same number of steps", True
    )


def check(config: RecipeView) -> None:
    """bench_decoding's load check: :func:`validate_section` on its section."""
    check_own_section("bench_decoding", validate_section, config)


def validate_section(section: Any) -> None:
    """Raise a one-line :class:`ConfigError` naming ``bench_decoding.<key>`` for a setting that cannot be measured."""
    sizes = list(section.batch_sizes)
    if not sizes:
        raise ConfigError("needs at least one batch size", "bench_decoding.batch_sizes")
    bad = [b for b in sizes if b < 1]
    if bad:
        raise ConfigError(f"batch sizes must be >= 1, got {bad}", "bench_decoding.batch_sizes")
    for key in ("repeats", "max_new_tokens", "k"):
        value = getattr(section, key)
        if value < 1:
            raise ConfigError(f"must be >= 1, got {value}", f"bench_decoding.{key}")
    if not (math.isfinite(section.alpha) and section.alpha >= 0):
        raise ConfigError(f"must be finite and >= 0, got {section.alpha}", "bench_decoding.alpha")
    if not (math.isfinite(section.min_seconds) and section.min_seconds >= 0):
        raise ConfigError(f"must be finite and >= 0, got {section.min_seconds}", "bench_decoding.min_seconds")
    if not section.target_ratio > 0:
        raise ConfigError(f"must be > 0, got {section.target_ratio}", "bench_decoding.target_ratio")
