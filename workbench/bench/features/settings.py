"""The 'bench_features' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workbench.core.config import doc, printable
from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView, check_own_section
from workbench.uncertainty.features import SEED_FEATURES, get_features


@dataclass
class AttentionMemorySection:
    """'bench_features.attention_memory': the peak memory of a prefill under the attention recorder, before and
    after it read only the rows the feature reads, on a random model of a given shape (each way in a fresh
    process)."""

    contexts: list[int] = doc("prompt lengths measured, in tokens (the issue's: 4096)", [1024, 4096])
    batch: int = doc("prompts per prefill (the issue's: 8)", 8)
    hidden_size: int = doc("model width (default: Llama-3.2-1B's shape)", 2048)
    heads: int = doc("attention heads", 32)
    kv_heads: int = doc("key/value heads", 8)
    head_dim: int = doc("width of a head", 64)
    intermediate_size: int = doc("MLP width", 8192)
    vocab_size: int = doc("vocabulary size", 128256)
    layers: int = doc(
        "decoder layers (Llama-3.2-1B has 16): the recorder wraps the last layer only, so its extra memory per "
        "forward is the same for any count; fewer layers keep the CPU forward short",
        2,
    )
    before_max_gb: float = doc(
        "the 'before' way (the full float32 scores) runs only where its analytic extra memory fits this many GB; "
        "beyond, the report gives the analytic figure, marked as such",
        8.0,
    )


@dataclass
class BenchFeaturesSection:
    """The 'bench_features' stage: the cost of the 18 features, shared stats vs one feature at a time vs bare."""

    split: str = doc("split the questions come from", "test")
    questions: int = doc("questions measured (the same ones for every way)", 8)
    features: list[str] = doc("features measured (default: the seed feature set (18))", list(SEED_FEATURES))
    samples: int = doc("answers sampled per question (N)", 5)
    temperature: float = doc("sampling temperature", 0.7)
    max_new_tokens: int = doc("length cap of the greedy answer and of each sample", 16)
    paraphrases: int = doc("self_detection: the question plus P - 1 paraphrases (P)", 5)
    repeats: int = doc(
        "timed runs of the bare generations and the workbench, after one warm-up run each, in rotated order "
        "(median and min-max reported)",
        3,
    )
    per_feature_repeats: int = doc("timed runs of each feature alone, both per-feature ways (median reported)", 1)
    parts: list[str] = doc(
        "what to measure: 'cost' (the ways above) and 'attention_memory' (the attention recorder's peak memory)",
        ["cost", "attention_memory"],
    )
    attention_memory: AttentionMemorySection = doc(
        "the attention recorder's peak memory (part 'attention_memory')", AttentionMemorySection()
    )


def check(config: RecipeView) -> None:
    """bench_features's load check: :func:`validate_section` on its section."""
    check_own_section("bench_features", validate_section, config)


PARTS = ("cost", "attention_memory")
"""What ``bench_features.parts`` may name."""


def validate_section(section: Any) -> None:
    """Raise a one-line :class:`ConfigError` naming ``bench_features.<key>`` for a setting that cannot be measured
    (an unknown feature name or part, no part, fewer than one question / sample / token / paraphrase / repeat, an
    attention-memory shape whose heads do not group over its key/value heads, no context, a negative budget)."""

    get_features(list(section.features))  # unknown names → ConfigError
    for key in ("questions", "samples", "max_new_tokens", "paraphrases", "repeats", "per_feature_repeats"):
        value = getattr(section, key)
        if value < 1:
            raise ConfigError(f"must be >= 1, got {value}", f"bench_features.{key}")
    unknown = [part for part in section.parts if part not in PARTS]
    if unknown or not section.parts:
        shown = f"unknown part {printable(repr(unknown[0]), 40)}" if unknown else "no part"
        raise ConfigError(f"{shown} (known: {', '.join(PARTS)})", "bench_features.parts")
    memory = section.attention_memory
    if not memory.contexts:
        raise ConfigError("no context to measure", "bench_features.attention_memory.contexts")
    if memory.heads % memory.kv_heads:
        raise ConfigError(
            f"heads ({memory.heads}) must be a multiple of kv_heads ({memory.kv_heads})",
            "bench_features.attention_memory.heads",
        )
    if not memory.before_max_gb >= 0:
        raise ConfigError(f"must be >= 0, got {memory.before_max_gb}", "bench_features.attention_memory.before_max_gb")
