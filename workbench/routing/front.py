"""Routers on the (quality, cost) plane: the Pareto front, the pick rule, and the comparison with Always-RAG.

A :class:`RoutePoint` is one router at one τ: its routed quality (mean routed QA score) and retrieval rate on the
fit split out of fold, its per-question cost (:class:`~workbench.routing.cost.CostModel`) and the scalar that orders
it. The **front** holds the points no other point beats on both quality (higher) and cost (lower). The **pick rule**
(:func:`pick`) takes the cheapest shippable point whose quality is within ``delta`` of Always-RAG's on the same
questions — "the cheapest router that loses at most one point" with ``delta = 0.01`` — ties to the higher quality;
when no point is within ``delta``, the best-quality point, flagged ``within_delta: false``.

On the evaluation split, :func:`compare_to_always` measures the picked router against Always-RAG with paired
bootstrap intervals over the questions (the same resamples for both): the quality difference and the cost saving.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


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
        """JSON-ready (NaN → None)."""
        out = {
            "name": self.name,
            "quality": _num(self.quality),
            "rate": _num(self.rate),
            "scalar": _num(self.scalar),
            "cost": {k: _num(v) for k, v in self.cost.items()},
            "tau": _num(self.tau) if self.tau is not None else None,
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


def pick(points: Sequence[RoutePoint], always_quality: float, delta: float) -> tuple[RoutePoint, bool]:
    """The cheapest single-step point with quality ≥ ``always_quality − delta`` (ties: higher quality, then the
    first); without one, the best-quality single-step point. Returns ``(point, within_delta)``."""
    single = [p for p in points if p.kind == "single"]
    if not single:
        raise ValueError("no single-step router to pick from")
    ok = [p for p in single if p.quality >= always_quality - delta - 1e-12]
    if ok:
        return min(ok, key=lambda p: (p.scalar, -p.quality)), True
    return max(single, key=lambda p: (p.quality, -p.scalar)), False


def tau_sweep(p_correct: np.ndarray) -> np.ndarray:
    """Every τ that gives a distinct retrieval set for ``p_correct`` (retrieve iff p < τ): 0, the midpoints of the
    sorted unique values and 1 + ε (:func:`~workbench.classify.threshold.candidate_thresholds`)."""
    from workbench.classify.threshold import candidate_thresholds

    return candidate_thresholds(np.asarray(p_correct, dtype=float))


def bootstrap_interval(
    values: np.ndarray, *, draws: int = 2000, level: float = 0.9, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the mean of ``values`` (one per question) over ``draws`` resamples of the questions."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = arr[rng.integers(0, arr.size, (draws, arr.size))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    return float(np.quantile(means, tail)), float(np.quantile(means, 1.0 - tail))


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
    features, plus the retrieval where it retrieved), ``always_cost`` Always-RAG's. Paired 90% bootstrap
    intervals (the same question resamples for every figure) of the quality difference (router − Always-RAG, in
    points of the score) and of the relative saving (1 − router cost / Always-RAG cost)."""
    routed, always = np.asarray(routed, dtype=float), np.asarray(always, dtype=float)
    cost = np.asarray(router_cost, dtype=float)
    n = routed.size
    diff = routed - always
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, (draws, n)) if n else np.zeros((0, 0), dtype=int)
    saving = 1.0 - cost[idx].mean(axis=1) / always_cost if n and always_cost > 0 else np.array([math.nan])
    d_means = diff[idx].mean(axis=1) if n else np.array([math.nan])
    mean_cost = float(cost.mean()) if n else math.nan
    return {
        "questions": int(n),
        "quality": float(routed.mean()) if n else math.nan,
        "always_quality": float(always.mean()) if n else math.nan,
        "difference": float(diff.mean()) if n else math.nan,
        "difference_interval": [float(np.quantile(d_means, 0.05)), float(np.quantile(d_means, 0.95))],
        "cost": mean_cost,
        "always_cost": float(always_cost),
        "saving": 1.0 - mean_cost / always_cost if always_cost > 0 else math.nan,
        "saving_interval": [float(np.quantile(saving, 0.05)), float(np.quantile(saving, 0.95))],
        "draws": int(draws),
    }
