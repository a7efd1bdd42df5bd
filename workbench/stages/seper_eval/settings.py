"""The 'seper_eval' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.core.config import doc


@dataclass
class SeperEvalSection:
    """The 'seper_eval' stage: rank retrievers by mean ΔSePer (retrieval utility) on a labelled split."""

    split: str = doc("split to evaluate on (needs gold answers)", "test")
    limit: int = doc("questions evaluated", 30)
    retrievers: list[Literal["bm25", "dense", "hybrid", "dtr", "gold", "random"]] = doc(
        "context sources to rank (dtr = DTR's dual-path retrieval with adaptive selection; controls: gold = the "
        "question's gold passages, random = irrelevant passages of other documents)",
        ["bm25", "dense", "hybrid", "dtr", "gold", "random"],
    )
    k: int = doc("passages per context", 5)
    corpus_size: int | None = doc(
        "passages searched: the gold documents' chunks plus random others (null: the whole corpus)", 1000
    )
    samples: int = doc("SePer: answers sampled per condition (the paper uses 10)", 10)
    temperature: float = doc("SePer: sampling temperature (the paper uses 1.0)", 1.0)
    max_new_tokens: int = doc("SePer: length cap of each sampled answer", 16)
    passage_chars: int = doc("each passage is cut to this many characters", 400)
