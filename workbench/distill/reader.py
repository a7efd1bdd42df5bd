"""Training rows of a reader adapter: the answering model taught to answer the workbench's questions, from passages
when it has them.

A small instruct model reads its passages poorly: given the passage that states the answer, SmolLM2-135M picks the
same option it picks closed-book (docs/task.md). A reader adapter is trained on questions of a *training* split,
each rendered in every answer mode (closed-book, with the retriever's passages, with its gold passages) exactly as
the answer stage renders it, with the gold answer as the target: the same question teaches "answer from the passage"
where a passage holds it and "answer from memory" where none is given. The rows have the fields
:func:`workbench.distill.train.train_student` reads (``input``, ``target``, ``single_token``, ``decision``); the
``decision`` is the answer mode, so the training record counts rows per mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from workbench.core.errors import DataError


def reader_target(question: Mapping[str, Any]) -> str:
    """The answer a reader learns for ``question`` (a QA row): the gold option of an either-or question (its
    ``options[answer_index]``: the scorer accepts the option's text), else its first gold alias. DataError when it
    has neither."""
    options = list(question.get("options") or [])
    index = question.get("answer_index", -1)
    if options and index is not None and 0 <= int(index) < len(options):
        return str(options[int(index)])
    answers = [str(a) for a in question.get("answers") or [] if str(a).strip()]
    if not answers:
        raise DataError(f"question {question.get('id')!r} has no gold answer to train on", "tune_reader")
    return answers[0]


def reader_rows(questions: Sequence[Mapping[str, Any]], prompts: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
    """One training row per question and answer mode: ``prompts[mode][i]`` is the rendered prompt of
    ``questions[i]`` in ``mode``; the target is :func:`reader_target` (a generative target: training appends EOS so
    the reader learns to stop after the answer). ValueError when a mode's prompts do not match the questions."""
    rows = []
    targets = [reader_target(q) for q in questions]
    for mode, texts in prompts.items():
        if len(texts) != len(questions):
            raise ValueError(f"{len(texts)} prompts in mode {mode!r} for {len(questions)} questions")
        for question, text, target in zip(questions, texts, targets, strict=True):
            rows.append(
                {
                    "input": str(text),
                    "target": target,
                    "single_token": False,
                    "decision": mode,
                    "question_id": str(question.get("id", "")),
                }
            )
    return rows
