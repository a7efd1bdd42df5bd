"""The 'bench_features' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.core.config import doc
from workbench.core.settings import RecipeView, check_own_section
from workbench.uncertainty.features import D2RAG_FEATURES


@dataclass
class BenchFeaturesSection:
    """The 'bench_features' stage: the cost of the 18 features, shared stats vs one feature at a time vs bare."""

    split: str = doc("split the questions come from", "test")
    questions: int = doc("questions measured (the same ones for every way)", 8)
    features: list[str] = doc("features measured (default: the 18 of D²-RAG)", list(D2RAG_FEATURES))
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


def check(config: RecipeView) -> None:
    """bench_features's load check: :func:`workbench.stages.bench_features.validate_section` on its section."""
    from workbench.stages.bench_features import validate_section

    check_own_section("bench_features", validate_section, config)
