"""The question streams of the lifecycle benchmark, answered by the bundle and labelled by the run's correctness label.

* the **deployment traffic**: the first questions of the run's test split (the split the bundle was evaluated on,
  drawn like its calibration split), answered closed-book;
* a **shifted stream**: the run's held-out-topic split (``ood``: questions of the same templates about topics no
  fitted split saw), or questions of another wiki-qa template about the run's test articles (another task), each
  answered closed-book and with retrieval.

Answers come from the bundle's own methods (``no_rag``: the closed-book prompt the answer stage uses;
``standard_rag``: the bundle's retriever and its top k), so they go through the generation cache like every answer.
Labels are the run's correctness label, gold containment (:func:`~workbench.metrics.qa.score_answer`'s
``contains``): what a user marking answers right or wrong would give, simulated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.core.errors import ConfigError, DataError
from workbench.data.wikiqa import build_wikiqa, load_articles
from workbench.metrics.qa import score_answer
from workbench.stages.settings.shared import data_fractions

CLOSED_BOOK = "no_rag"
RETRIEVED = "standard_rag"


def first_rows(split: Any, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` rows of a QA split (a Dataset) as dicts."""
    return [dict(row) for row in split.select(range(min(limit, len(split))))]


def shift_rows(qa: Any, shift: str, limit: int, run_config: Any) -> list[dict[str, Any]]:
    """The first ``limit`` questions of shift ``shift``: the run's ``ood`` split, or the questions of template
    ``shift`` about the run's test articles, built as the run's build_data built its own (same seed, fractions and
    held-out topics, so the articles are the test split's). DataError when the split is missing or empty."""
    if shift == "ood":
        if "ood" not in qa or len(qa["ood"]) == 0:
            raise DataError(
                "the run's dataset has no held-out-topic split (ood): set data.ood_topics", "lifecycle.shifts"
            )
        return first_rows(qa["ood"], limit)
    data = run_config.data
    if data.dataset != "wiki-qa":
        raise ConfigError(f"a template shift needs a wiki-qa run, this one read {data.dataset}", "lifecycle.shifts")
    built = build_wikiqa(
        load_articles(),
        seed=run_config.seed,
        templates=(shift,),
        max_per_template=data.max_per_template,
        fractions=tuple(data_fractions(run_config)),
        ood_topics=list(data.ood_topics),
    )
    if len(built["test"]) == 0:
        raise DataError(f"template {shift} gives no question about the run's test articles", "lifecycle.shifts")
    return first_rows(built["test"], limit)


def answer(runtime: Any, rows: Sequence[dict[str, Any]], method: str) -> tuple[list[str], list[bool | None]]:
    """The bundle's answers to ``rows`` with ``method`` (batched as the runtime batches) and each question's
    out-of-distribution flag (None when the bundle has no OOD profile), as ``serve`` would log them."""
    if method not in runtime.methods:
        raise ConfigError(f"the bundle has no method {method} (has: {', '.join(runtime.methods)})", "lifecycle.bundle")
    answers = runtime.answer_many([str(r["question"]) for r in rows], method)
    return [a.text for a in answers], [bool(a.ood["flag"]) if a.ood else None for a in answers]


def labels(rows: Sequence[dict[str, Any]], answers: Sequence[str]) -> list[int]:
    """Gold containment of each answer (1 correct, 0 wrong): the simulated user feedback."""
    return [
        int(score_answer(text, list(row["answers"]), list(row.get("options") or []))["contains"])
        for row, text in zip(rows, answers, strict=True)
    ]
