"""The 'bench_backends' stage's settings (recipe key ``bench``): its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.core.config import doc
from workbench.core.settings import RecipeView
from workbench.stages.settings.shared import check_split


@dataclass
class BenchSection:
    """The 'bench_backends' stage: generator, NLI and retrieval speed and quality, compared by ratios in one run."""

    questions: int = doc("questions (prompts) used for the generator measurements", 8)
    samples: int = doc("samples per prompt for the shared-prefill vs re-encoding comparison", 10)
    max_new_tokens: int = doc("tokens generated per answer or sample (EOS and stop strings are ignored)", 20)
    temperature: float = doc("sampling temperature", 0.7)
    repeats: int = doc("timing repeats (the median is reported)", 2)
    nli_pairs: int = doc("held-out NLI pairs and short-answer pairs per judge", 100)
    nli_judges: list[Literal["answer_equivalence", "cross_encoder", "llm", "hf"]] = doc(
        "judges to measure (cross_encoder is skipped with a note when nli.model does not exist)",
        ["answer_equivalence", "cross_encoder", "llm"],
    )
    retrieval_questions: int = doc("test questions whose gold passage must be retrieved", 200)
    corpus_size: int = doc(
        "passages searched: every gold passage plus random others (null-free; keeps dense fast)", 2000
    )
    ks: list[int] = doc("recall@k cut-offs", [1, 5, 10])


def check(config: RecipeView) -> None:
    """bench_backends's load check: the ``test`` split it always reads gets questions (blamed on data.fractions)."""

    check_split(config, "bench_backends", "data.fractions", "test")
