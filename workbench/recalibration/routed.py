"""Routed quality before and after a recalibration, on the held-out feedback, with paired BCa intervals.

Each held-out row is routed twice, by the parent's decision (before) and by the new version's (after): retrieve iff
P(correct) < τ. Per decision this reports the **retrieval rate** and one quality figure, named in ``metric``:

* ``routed_quality`` — when every row has ``label_retrieved``: the mean over rows of ``label_retrieved`` where the
  decision retrieves and ``label`` where it does not (how often the answer the user gets is correct, had the
  answer been made the way the decision routes it);
* ``selective_accuracy`` — without it: the share of correct answers among those the decision keeps closed-book
  (``label`` where it does not retrieve; undefined when it retrieves for every row).

The intervals of both decisions and of the changes (after − before) come from the same seeded resamples of the rows
(:func:`~workbench.metrics.bootstrap.bootstrap_intervals`), so they are paired.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from workbench.metrics.bootstrap import Interval, bootstrap_intervals, describe

DEFINITIONS = {
    "routed_quality": "mean of label_retrieved where retrieved, label where not",
    "selective_accuracy": "share of correct answers among those kept closed-book (no label_retrieved in the feedback)",
}


def routed_comparison(
    labels: np.ndarray,
    retrieved_labels: np.ndarray | None,
    retrieve_before: np.ndarray,
    retrieve_after: np.ndarray,
    *,
    seed: int,
    n_resamples: int,
) -> dict[str, Any]:
    """``{metric, definition, rows, intervals, retrieval_rate, quality}`` of the held-out rows (module docstring);
    ``retrieval_rate`` and ``quality`` each hold ``before``, ``after``, ``change`` and their intervals."""
    y = np.asarray(labels, dtype=float)
    routes = np.stack([np.asarray(retrieve_before, dtype=bool), np.asarray(retrieve_after, dtype=bool)])
    metric = "routed_quality" if retrieved_labels is not None else "selective_accuracy"
    with_retrieval = None if retrieved_labels is None else np.asarray(retrieved_labels, dtype=float)

    def statistic(idx: np.ndarray) -> np.ndarray:  # idx: (..., n) → (6, ...): rates, qualities, their changes
        label = y[idx]
        rates, qualities = [], []
        for route in routes:
            r = route[idx]
            rates.append(r.mean(axis=-1))
            if with_retrieval is not None:
                qualities.append(np.where(r, with_retrieval[idx], label).mean(axis=-1))
            else:
                kept = (~r).sum(axis=-1)
                with np.errstate(invalid="ignore", divide="ignore"):
                    qualities.append(np.where(kept > 0, (label * ~r).sum(axis=-1) / kept, np.nan))
        return np.stack([*rates, *qualities, rates[1] - rates[0], qualities[1] - qualities[0]])

    point = statistic(np.arange(y.size))
    intervals = bootstrap_intervals(statistic, y.size, n_resamples=n_resamples, seed=seed, vectorized=True)

    def figure(before: int, after: int, change: int) -> dict[str, Any]:
        return {
            "before": rounded(point[before]),
            "after": rounded(point[after]),
            "change": rounded(point[change]),
            "before_ci": interval_record(intervals[before]),
            "after_ci": interval_record(intervals[after]),
            "change_ci": interval_record(intervals[change]),
        }

    return {
        "metric": metric,
        "definition": DEFINITIONS[metric],
        "rows": int(y.size),
        "intervals": describe(n_resamples),
        "retrieval_rate": figure(0, 1, 4),
        "quality": figure(2, 3, 5),
    }


def not_worse(routing: dict[str, Any]) -> bool:
    """Whether the quality after is not worse than before beyond its interval: the upper end of the change's
    interval is at least 0 (a change whose interval is undefined counts by its point value, and an undefined point
    — every row retrieved before or after, under ``selective_accuracy`` — as not worse)."""
    change = routing["quality"]
    high = change["change_ci"]["high"]
    value = high if high is not None else change["change"]
    return value is None or value >= 0.0


def rounded(value: float) -> float | None:
    """``value`` rounded to 6 decimals for the manifest, None for NaN (JSON has no NaN)."""
    return None if math.isnan(value) else round(float(value), 6)


def interval_record(interval: Interval) -> dict[str, Any]:
    """An interval as the manifest records it: ``{low, high, method}``."""
    return {"low": rounded(interval.low), "high": rounded(interval.high), "method": interval.method}
