"""The adaptive-retrieval protocol's per-question columns (AdaRAGUE, Moskvoretskii et al., ACL 2025).

* **in-accuracy** — the share of questions whose retrieve decision is right, the label being "the closed-book answer
  is wrong": retrieving for a question the model gets wrong closed-book, or not retrieving for one it gets right.
* **RC** — retrieval (retriever) calls per question.
* **LMC** — LM calls per question (the workbench's ``lm_calls``: prompts run through the model).

The routing table (``classify``) and the evaluate table both compute in-accuracy and write the three cells here, so
one table reads like the protocol's.
"""

from __future__ import annotations

import numpy as np

from workbench.core.errors import DataError


def in_accuracy(retrieved: object, closed_book_wrong: object) -> float:
    """The share of questions where ``retrieved`` (bool per question) equals ``closed_book_wrong`` (bool per
    question: the closed-book answer is wrong); NaN for no questions. DataError when the lengths differ."""
    decided = np.asarray(retrieved, dtype=bool).reshape(-1)
    needed = np.asarray(closed_book_wrong, dtype=bool).reshape(-1)
    if decided.size != needed.size:
        raise DataError(f"{decided.size} decisions for {needed.size} labels", "in_accuracy")
    return float((decided == needed).mean()) if decided.size else float("nan")


def protocol_cells(row: dict) -> str:
    """The cells in-accuracy | retrieval rate | RC of a routing-table or evaluate-table row (Markdown)."""
    rate = optional_cell(row, "retrieval_rate", 2)
    return f"{optional_cell(row, 'in_accuracy', 3)} | {rate} | {optional_cell(row, 'retrieval_calls', 2)}"


def optional_cell(row: dict, key: str, digits: int) -> str:
    """``row[key]`` to ``digits`` decimals, or – where a table written before the column existed lacks it (or holds
    None / NaN: e.g. in-accuracy without a closed-book label)."""
    value = row.get(key)
    return "–" if value is None or value != value else f"{value:.{digits}f}"
