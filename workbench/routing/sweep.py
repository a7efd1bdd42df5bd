"""The τ sweep: a router's routed quality and retrieval rate at every τ on one split, with intervals.

A router retrieves iff its P(correct) < τ. Every τ that gives a distinct retrieval set on the split
(:func:`~workbench.routing.front.tau_sweep`: 0 — never —, the midpoints of the sorted distinct P(correct), 1 + ε —
always) is one row: the retrieval rate with its Wilson interval, the routed score (the answer with passages where
it retrieves, the closed-book one elsewhere) with its BCa bootstrap interval, the difference from Always-RAG with
its paired interval (the same question resamples for every row and figure), and, with a cost function, the cost per
question. The classify stage writes it for the router the run ships, on the evaluation split (``tau_sweep.json``);
the report draws it and marks the shipped τ, so τ can be chosen after the run (``workbench decide``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from workbench.metrics.bootstrap import bootstrap_intervals
from workbench.metrics.proportion import wilson_interval
from workbench.routing.front import tau_sweep


def sweep_rows(
    p_correct: Sequence[float],
    qa_closed: Sequence[float],
    qa_rag: Sequence[float],
    *,
    taus: Sequence[float] | None = None,
    cost: Callable[[float, float], float] | None = None,
    draws: int = 2000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One row per τ (``taus``; default: every distinct retrieval set of ``p_correct``), ascending: ``tau``,
    ``tau_range`` (``[low, high]``: every τ in (low, high] retrieves for the same questions — the set changes at the
    P(correct) values; high None: any τ above low), ``retrieved`` (questions), ``retrieval_rate`` and
    ``rate_interval`` (Wilson), ``quality`` and ``quality_interval`` (BCa), ``difference`` from Always-RAG
    (``qa_rag``) and ``difference_interval`` (paired BCa), and ``cost`` — ``cost(tau, rate)`` per question, when
    given. Intervals at 90 %, over ``draws`` resamples of the questions (seeded); None with fewer than two
    questions. ValueError on unequal lengths."""

    p = np.asarray(p_correct, dtype=float).reshape(-1)
    closed, rag = np.asarray(qa_closed, dtype=float).reshape(-1), np.asarray(qa_rag, dtype=float).reshape(-1)
    if not p.size == closed.size == rag.size:
        raise ValueError(f"sweep_rows: {p.size} predictions, {closed.size} / {rag.size} scores")
    grid = np.sort(np.asarray(tau_sweep(p) if taus is None else taus, dtype=float))
    retrieve = p[None, :] < grid[:, None]  # (τ, question)
    routed = np.where(retrieve, rag[None, :], closed[None, :])
    figures = np.concatenate([routed, routed - rag[None, :]])  # (2 × τ, question): quality, then difference
    n, k = p.size, grid.size

    def statistic(idx: np.ndarray) -> np.ndarray:
        # the mean of each figure over each resample, as resample multiplicities × figures (no (τ, B, n) array)
        rows = idx.reshape(-1, idx.shape[-1])
        counts = np.zeros((rows.shape[0], n))
        np.add.at(counts, (np.arange(rows.shape[0])[:, None], rows), 1.0)
        means = counts @ figures.T / rows.shape[1]
        return np.moveaxis(means.reshape(*idx.shape[:-1], 2 * k), -1, 0)

    intervals = bootstrap_intervals(statistic, n, n_resamples=draws, seed=seed, vectorized=True)
    values = np.unique(p)
    out = []
    for j, tau in enumerate(grid):
        count = int(retrieve[j].sum())
        rate = count / n if n else float("nan")
        below, above = values[values < tau], values[values >= tau]
        out.append(
            {
                "tau": float(tau),
                # every τ in (low, high] retrieves for the same questions: the set changes at the P(correct) values
                "tau_range": [float(below[-1]) if below.size else 0.0, float(above[0]) if above.size else None],
                "retrieved": count,
                "retrieval_rate": rate,
                "rate_interval": _pair(wilson_interval(count, n)),
                "quality": float(routed[j].mean()) if n else float("nan"),
                "quality_interval": _pair(intervals[j].as_tuple()),
                "difference": float((routed[j] - rag).mean()) if n else float("nan"),
                "difference_interval": _pair(intervals[k + j].as_tuple()),
                "cost": None if cost is None else float(cost(float(tau), rate)),
            }
        )
    return out


def row_at(rows: Sequence[dict[str, Any]], p_correct: Sequence[float], tau: float) -> dict[str, Any] | None:
    """The row of ``rows`` (a sweep of ``p_correct``) with the retrieval set τ gives: the same number of questions
    retrieved (the sets are nested in τ, so the count names the set); None when no row has it."""
    count = int((np.asarray(p_correct, dtype=float) < tau).sum())
    return next((r for r in rows if r["retrieved"] == count), None)


def _pair(interval: tuple[float, float] | None) -> list[float] | None:
    """An interval as a JSON pair, None when missing or not finite."""
    if interval is None or not all(np.isfinite(interval)):
        return None
    return [float(interval[0]), float(interval[1])]
