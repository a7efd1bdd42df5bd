"""The 'answer' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.core.config import doc


@dataclass
class AnswerSection:
    """The 'answer' stage: answer a split closed-book and with retrieval, and score the answers."""

    split: str = doc("which split to answer (train, calib, val, test, ood)", "test")
    limit: int | None = doc("answer only the first N questions of the split (null: all)", 50)
    per_template: int | None = doc("then at most N questions of each template, in split order (null: no cap)", None)
    modes: list[Literal["closed_book", "rag", "gold"]] = doc(
        "answering modes: closed_book, rag (retrieved top-k) and gold (the gold passages: the ceiling)",
        ["closed_book", "rag"],
    )
    max_new_tokens: int = doc("answer length cap in tokens (answers stop at the first newline)", 16)
    passage_chars: int = doc("each retrieved passage is cut to this many characters in the prompt", 400)
