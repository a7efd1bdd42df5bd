"""The evaluate table's intervals: a BCa interval of each method's per-question quality means.

Each method's EM, token F1 and containment are means over its questions, and its decision accuracy a mean over the
questions the closed-book method answered (its retrieve decision against "that answer is wrong"); each gets a
:data:`~workbench.metrics.bootstrap.LEVEL` BCa interval from the workbench's one bootstrap helper
(:func:`~workbench.metrics.bootstrap.bootstrap_intervals`), the method's figures on the same resamples of its
questions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.methods.evaluation import closed_book_wrong
from workbench.metrics.bootstrap import LEVEL, N_RESAMPLES, mean_intervals

QUALITY_KEYS = ("em", "f1", "contains")
"""The per-question scores of a trace record whose means the evaluate table reports."""


def quality_intervals(
    records: Sequence[dict[str, Any]], *, draws: int = N_RESAMPLES, level: float = LEVEL, seed: int = 0
) -> dict[str, dict[str, list[float | None]]]:
    """Per method (first-seen order of ``record["method"]``): ``{key: [low, high]}`` for each of
    :data:`QUALITY_KEYS` and, when the records hold closed-book answers, ``decision_accuracy`` (over the questions the
    closed-book method answered). ``[None, None]`` where the helper gives no interval (fewer than two questions, a
    NaN figure)."""
    wrong = closed_book_wrong(records)
    out: dict[str, dict[str, list[float | None]]] = {}
    for method in dict.fromkeys(r["method"] for r in records):
        rows = [r for r in records if r["method"] == method]
        columns = {key: [float(r[key]) for r in rows] for key in QUALITY_KEYS}
        out[method] = _mean_intervals(columns, draws=draws, level=level, seed=seed)
        if wrong:
            decided = [float(bool(r["retrieved"]) == wrong[r["id"]]) for r in rows if r["id"] in wrong]
            out[method] |= _mean_intervals({"decision_accuracy": decided}, draws=draws, level=level, seed=seed)
    return out


def _mean_intervals(
    columns: dict[str, list[float]], *, draws: int, level: float, seed: int
) -> dict[str, list[float | None]]:
    """The interval of each column's mean, all columns (of equal length) on the same resamples."""
    names = list(columns)
    matrix = np.asarray([columns[name] for name in names], dtype=float).reshape(len(names), -1)
    intervals = mean_intervals(matrix, n_resamples=draws, level=level, seed=seed)
    return {name: i.as_bounds() for name, i in zip(names, intervals, strict=True)}
