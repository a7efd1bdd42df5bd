"""Routers on the (quality, cost) plane: the Pareto front and the comparison with Always-RAG.

A :class:`RoutePoint` is one router at one τ: its routed quality (mean routed QA score) and retrieval rate on the
fit split out of fold, its per-question cost (:class:`~workbench.routing.cost.CostModel`) and the scalar that orders
it. The **front** holds the points no other point beats on both quality (higher) and cost (lower). Which point is
shipped is the user's pick rule (:mod:`workbench.routing.pick`).

On the evaluation split, :func:`compare_to_always` measures the picked router against Always-RAG with paired BCa
bootstrap intervals over the questions (the same resamples for both): the quality difference and the cost saving.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.classify.threshold import candidate_thresholds
from workbench.metrics.bootstrap import bootstrap_intervals, mean_interval


@dataclass
class RoutePoint:
    """One router at one τ (``kind``: ``single`` — one classifier; ``cascade`` — two steps, measured only: the
    runtime ships single-step routers). ``cost`` holds the per-question cost fields, ``scalar`` the cost in the
    model's unit, ``origin`` which search produced it (``forward`` / ``study`` / ``reference``)."""

    name: str
    quality: float
    rate: float
    scalar: float
    cost: dict[str, float]
    tau: float | None = None
    spec: dict[str, Any] | None = None
    kind: str = "single"
    origin: str = "forward"
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN → None; figures to 6 decimals, τ exact)."""
        out = {
            "name": self.name,
            "quality": _num(self.quality),
            "rate": _num(self.rate),
            "scalar": _num(self.scalar),
            "cost": {k: _num(v) for k, v in self.cost.items()},
            # τ unrounded: 1 + ε (always retrieve) must stay above 1, and a midpoint must keep its retrieval set
            "tau": float(self.tau) if self.tau is not None and math.isfinite(self.tau) else None,
            "spec": self.spec,
            "kind": self.kind,
            "origin": self.origin,
        }
        if self.extra:
            out["extra"] = self.extra
        return out


def _num(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else round(float(value), 6)


def pareto(points: Sequence[RoutePoint]) -> list[RoutePoint]:
    """The points no other point dominates (quality ≥ and cost ≤, one strictly), sorted by cost; among points with
    the same quality and cost the first is kept."""
    ordered = sorted(points, key=lambda p: (p.scalar, -p.quality))
    front: list[RoutePoint] = []
    best = -math.inf
    for point in ordered:
        if point.quality > best + 1e-12:
            front.append(point)
            best = point.quality
    return front


def tau_sweep(p_correct: np.ndarray) -> np.ndarray:
    """Every τ that gives a distinct retrieval set for ``p_correct`` (retrieve iff p < τ): 0, the midpoints of the
    sorted unique values and 1 + ε (:func:`~workbench.classify.threshold.candidate_thresholds`)."""

    return candidate_thresholds(np.asarray(p_correct, dtype=float))


def bootstrap_interval(
    values: np.ndarray, *, draws: int = 2000, level: float = 0.9, seed: int = 0
) -> tuple[float, float]:
    """BCa interval of the mean of ``values`` (one per question) over ``draws`` resamples of the questions
    (:func:`workbench.metrics.bootstrap.mean_interval`; NaN with fewer than two questions)."""

    return mean_interval(values, n_resamples=draws, level=level, seed=seed).as_tuple()


def compare_to_always(
    routed: np.ndarray,
    always: np.ndarray,
    router_cost: np.ndarray,
    always_cost: float,
    *,
    draws: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """The picked router against Always-RAG on the evaluation split, per question: ``routed`` / ``always`` are
    the routed and the Always-RAG QA scores, ``router_cost`` the router's cost of each question in the unit (its
    features, plus the retrieval where it retrieved), ``always_cost`` Always-RAG's. Paired 90% BCa bootstrap
    intervals (:func:`workbench.metrics.bootstrap.bootstrap_intervals`: the same question resamples for both
    figures) of the quality difference (router − Always-RAG, in points of the score) and of the relative saving
    (1 − router cost / Always-RAG cost); a figure constant over the resamples gets the percentile interval (its
    value twice), and NaN intervals with fewer than two questions or no Always-RAG cost."""

    routed, always = np.asarray(routed, dtype=float), np.asarray(always, dtype=float)
    cost = np.asarray(router_cost, dtype=float)
    n = routed.size
    diff = routed - always

    def statistic(idx: np.ndarray) -> list[float]:
        saving = 1.0 - float(cost[idx].mean()) / always_cost if always_cost > 0 else math.nan
        return [float(diff[idx].mean()), saving]

    d_interval, s_interval = bootstrap_intervals(statistic, n, n_resamples=draws, seed=seed)
    mean_cost = float(cost.mean()) if n else math.nan
    return {
        "questions": int(n),
        "quality": float(routed.mean()) if n else math.nan,
        "always_quality": float(always.mean()) if n else math.nan,
        "difference": float(diff.mean()) if n else math.nan,
        "difference_interval": list(d_interval.as_tuple()),
        "cost": mean_cost,
        "always_cost": float(always_cost),
        "saving": 1.0 - mean_cost / always_cost if always_cost > 0 else math.nan,
        "saving_interval": list(s_interval.as_tuple()),
        "draws": int(draws),
    }
