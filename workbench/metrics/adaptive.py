"""The adaptive-retrieval protocol's per-question columns (AdaRAGUE, Moskvoretskii et al., ACL 2025).

* **decision accuracy** — the share of questions whose retrieve decision is right, the label being "the closed-book
  answer is wrong": retrieving for a question the model gets wrong closed-book, or not retrieving for one it gets
  right. AdaRAGUE trains its routers on this label but reports answer quality: its **In-Accuracy** column is whether
  the gold answer is contained in the output (``has_answer`` in its ``UC/analyze_uncertainty.py``), which is the
  workbench's **containment** column, not this one.
* **RC** — retrieval (retriever) calls per question.
* **LMC** — LM calls per question (the workbench's ``lm_calls``: prompts run through the model).

The routing table (``classify``) and the evaluate table both compute decision accuracy here, and write the three cells
with :func:`workbench.stages.evaluate.report.protocol_cells`, so one table reads like the protocol's.
"""

from __future__ import annotations

import numpy as np

from workbench.core.errors import DataError


def decision_accuracy(retrieved: object, closed_book_wrong: object) -> float:
    """The share of questions where ``retrieved`` (bool per question) equals ``closed_book_wrong`` (bool per
    question: the closed-book answer is wrong); NaN for no questions. DataError when the lengths differ."""
    decided = np.asarray(retrieved, dtype=bool).reshape(-1)
    needed = np.asarray(closed_book_wrong, dtype=bool).reshape(-1)
    if decided.size != needed.size:
        raise DataError(f"{decided.size} decisions for {needed.size} labels", "decision_accuracy")
    return float((decided == needed).mean()) if decided.size else float("nan")
