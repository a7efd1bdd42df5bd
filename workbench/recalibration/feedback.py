"""The feedback ``workbench recalibrate`` reads: labelled answers, with the features the bundle's calibrators need.

A feedback row is a ``workbench score`` record (``id``, ``question``, ``answer``: checked by
:func:`~workbench.scoring.records.read_records`) plus ``label`` (0 or 1: was the answer correct) and, optionally,
``label_retrieved`` (0 or 1: was the answer made *with* retrieval correct; what routed quality and the
``max_routed_score`` rule read) and ``features`` (feature name → oriented value, ``null`` for NaN, as ``scores.jsonl``
writes them). A row without ``features`` takes them from the ``scores.jsonl`` of ``workbench score`` (``--scores``),
joined by ``id``.

Every row is checked before anything is fitted or written: a duplicate id, a label or ``label_retrieved`` outside
{0, 1}, an id the scores file does not hold, an answer other than the one the scores file scored for that id, a
feature the calibrators need that neither gives — one :class:`DataError` naming the file, the row (1-based) and the
field. Values read from the files are never echoed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.core.errors import DataError
from workbench.scoring.records import read_records, read_rows

FEEDBACK_LINE = (
    "a feedback row is {id, question, answer, label: 0|1, label_retrieved?: 0|1, features?} (docs/monitoring.md)"
)
"""The line every bad-feedback error ends with."""


@dataclass(frozen=True)
class Feedback:
    """One checked feedback row: its ``id``, its ``label`` (0 or 1), its raw oriented ``features`` in the order
    asked for (NaN where the value was ``null``), ``label_retrieved`` (0 or 1, None when the row has none) and the
    ``question`` (what the OOD flag of the monitoring reference checks)."""

    id: str
    label: int
    features: tuple[float, ...]
    label_retrieved: int | None = None
    question: str = ""


def read_scores(path: str | Path) -> dict[str, tuple[int, dict[str, Any], Any]]:
    """``id → (row number, features, answer)`` of a ``scores.jsonl`` written by ``workbench score`` (``answer`` None
    when the row has none); DataError naming the row and field on a row without an ``id`` or a ``features`` object,
    or a repeated id."""
    path = Path(path)
    out: dict[str, tuple[int, dict[str, Any], Any]] = {}
    for number, row in enumerate(read_rows(path), 1):
        where = f"{path}: row {number}"
        raw_id = row.get("id") if isinstance(row, dict) else None
        if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
            raise DataError("field 'id' must be a string or an integer (scores.jsonl of workbench score)", where)
        if not isinstance(row.get("features"), dict):
            raise DataError("field 'features' must be an object (scores.jsonl of workbench score)", where)
        if str(raw_id) in out:
            raise DataError(f"field 'id' repeats the id of row {out[str(raw_id)][0]}", where)
        out[str(raw_id)] = (number, row["features"], row.get("answer"))
    return out


def read_feedback(path: str | Path, features: Sequence[str], scores: str | Path | None = None) -> list[Feedback]:
    """Every row of the feedback file ``path`` (JSONL, parquet or an HF dataset folder) checked into a
    :class:`Feedback` carrying ``features`` in order (see the module docstring); ``scores`` is a ``scores.jsonl``
    giving the features of rows that carry none."""
    path = Path(path)
    records = read_records(path)  # id, question, answer checked; ids unique (score's own reader)
    rows = read_rows(path)
    scored = read_scores(scores) if scores is not None else None
    out: list[Feedback] = []
    for record, row in zip(records, rows, strict=True):
        where = f"{path}: row {record.position + 1}"
        label = _binary(row, "label", where)
        retrieved = _binary(row, "label_retrieved", where) if row.get("label_retrieved") is not None else None
        values = row.get("features")
        source = where
        if values is None:
            if scored is None:
                raise DataError(
                    f"field 'features' is missing and no scores file was given (--scores); {FEEDBACK_LINE}", where
                )
            if record.id not in scored:
                raise DataError(f"field 'id' is not an id of the scores file {scores}", where)
            number, values, scored_answer = scored[record.id]
            if isinstance(scored_answer, str) and scored_answer.strip() != record.answer.text.strip():
                raise DataError(f"field 'answer' differs from the answer row {number} of {scores} scored", where)
            source = f"{scores}: row {number}"
        values = _feature_values(values, features, source)
        out.append(Feedback(record.id, label, values, retrieved, record.question))
    return out


def _binary(row: dict[str, Any], field: str, where: str) -> int:
    """``row[field]`` as 0 or 1; DataError naming the field otherwise (a boolean included: JSON's true is no label)."""
    value = row.get(field)
    if isinstance(value, bool) or value not in (0, 1):
        raise DataError(f"field '{field}' must be 0 or 1; {FEEDBACK_LINE}", where)
    return int(value)


def _feature_values(values: Any, features: Sequence[str], where: str) -> tuple[float, ...]:
    """The ``features`` of one row's ``features`` object, in order: a number (±Infinity allowed), or ``null`` for
    NaN; DataError naming the first missing or non-numeric feature."""
    if not isinstance(values, dict):
        raise DataError(f"field 'features' must be an object; {FEEDBACK_LINE}", where)
    out: list[float] = []
    for name in features:
        if name not in values:
            raise DataError(f"field 'features.{name}' is missing: the bundle's calibrators need it", where)
        value = values[name]
        if value is None:
            out.append(math.nan)
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise DataError(f"field 'features.{name}' must be a number or null", where)
        else:
            out.append(float(value))
    return tuple(out)
