"""The 'bench_decoding' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.core.config import doc
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
    """bench_decoding's load check: :func:`workbench.bench.decoding.run.validate_section` on its section."""
    from workbench.bench.decoding.run import validate_section

    check_own_section("bench_decoding", validate_section, config)
