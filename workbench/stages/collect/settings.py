"""The 'collect' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.core.config import doc
from workbench.core.settings import RecipeView, check_own_section


@dataclass
class CollectSection:
    """The 'collect' stage: uncertainty features and correctness / utility labels, one row per question."""

    splits: list[str] = doc("splits to collect (each becomes one HF dataset)", ["calib", "test"])
    limit: int | None = doc("collect only the first N questions of each split (null: all)", 200)
    features: list[str] = doc(
        "features to compute (see docs/features.md; lars is fitted on lars_fit_split, dense retrieves contexts)",
        [
            "confidence",
            "entropy",
            "dtr_nll",
            "semantic_entropy",
            "matrix_degree_uncertainty",
            "sum_eigen_uncertainty",
            "eccentricity_uncertainty",
            "ptrue",
            "verbalized_confidence",
        ],
    )
    labels: list[Literal["rag", "seper", "llm_judge"]] = doc(
        "labels beyond closed-book EM / containment / F1: rag (answer with the retrieved passages and score it), "
        "seper (SePer-H / SePer-S with and without the passages, and ΔSePer), llm_judge (the generator judges the "
        "closed-book answer against the gold aliases)",
        ["rag", "seper"],
    )
    samples: int = doc("answers sampled per question (N)", 5)
    temperature: float = doc("sampling temperature of the N samples", 0.7)
    max_new_tokens: int = doc("length cap of the greedy answer and of each sample (answers stop at a newline)", 16)
    paraphrases: int = doc("self_detection: the question plus P - 1 paraphrases (P)", 5)
    passage_chars: int = doc("each retrieved passage is cut to this many characters (rag, seper, dense)", 400)
    dense_rephrase_tokens: int = doc("dense: length cap of each chunk's rephrasing", 96)
    seper_samples: int = doc("seper: answers sampled per condition (the paper uses 10)", 10)
    seper_temperature: float = doc("seper: sampling temperature (the paper uses 1.0)", 1.0)
    lars_fit_split: str = doc("lars: the split its scorer is fitted on (out of fold on that split itself)", "calib")
    lars_folds: int = doc("lars: folds of the cross-fitting on lars_fit_split", 5)
    batch_questions: int = doc("questions per batch; each finished batch is checkpointed (resumable)", 8)
    shard: str = doc("'i/N': collect only the questions whose position mod N == i (then `workbench merge`)", "0/1")


def check(config: RecipeView) -> None:
    """collect's load check: :func:`workbench.stages.collect.run.check_section` on its section."""
    from workbench.stages.collect.run import check_section

    check_own_section("collect", check_section, config)
