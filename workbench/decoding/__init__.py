"""Decoding strategies beyond the generator's greedy / sampled loop: contrastive decoding over two logit streams."""

from workbench.decoding.contrastive import (
    ContrastiveGeneration,
    StepChoice,
    choose_tokens,
    contrastive_generate,
    contrastive_scores,
    entropy,
    entropy_weight,
    sequential_contrastive_generate,
)

__all__ = [
    "ContrastiveGeneration",
    "StepChoice",
    "choose_tokens",
    "contrastive_generate",
    "contrastive_scores",
    "entropy",
    "entropy_weight",
    "sequential_contrastive_generate",
]
