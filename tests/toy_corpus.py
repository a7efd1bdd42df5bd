"""The toy corpus of the method and stage tests: six one-sentence passages (Paris, Lyon, Hamlet, Shakespeare, the
Seine, Stratford), and the corpus dataset of any such passages, one chunk per passage."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PASSAGES: list[tuple[str, str, str]] = [
    ("d0", "Paris", "Paris is the capital and largest city of France, on the river Seine."),
    ("d1", "Lyon", "Lyon is a city in France at the confluence of the Rhône and the Saône."),
    ("d2", "Hamlet", "Hamlet is a tragedy written by William Shakespeare around 1600."),
    ("d3", "Shakespeare", "William Shakespeare was an English playwright, poet and actor born in Stratford."),
    ("d4", "Seine", "The Seine is a river in northern France that flows through Paris to the English Channel."),
    ("d5", "Stratford", "Stratford-upon-Avon is a market town in Warwickshire, England."),
]
"""``(doc_id, title, text)`` of each passage."""


def corpus_dataset(passages: Sequence[tuple[str, str, str]] = PASSAGES) -> Any:
    """A ``datasets.Dataset`` with the corpus columns the methods read (``chunk_id``, ``doc_id``, ``title``, ``text``,
    ``index``): one chunk, ``<doc_id>#0``, per ``(doc_id, title, text)`` passage."""
    import datasets

    return datasets.Dataset.from_dict(
        {
            "chunk_id": [f"{d}#0" for d, _, _ in passages],
            "doc_id": [d for d, _, _ in passages],
            "title": [t for _, t, _ in passages],
            "text": [x for _, _, x in passages],
            "index": [0] * len(passages),
        }
    )
