"""The pick rule: which router a run ships, chosen by the user's rule among the routers found on the fit split.

Three rules (``classify.pick``; ``workbench decide --pick``), each over the single-step points (one router at one τ:
its out-of-fold routed quality, retrieval rate and cost per question on the fit split):

* ``cheapest_within`` (ε) — the cheapest point whose quality is within ε of Always-RAG's: "save what can be saved
  without losing more than ε". Ties go to the higher quality. Without such a point, the best-quality one, flagged.
* ``best_quality`` — the highest quality, ties to the cheaper: for data where retrieval *hurts* some questions, so
  a router can beat retrieving every time.
* ``max_quality_under`` (a budget: retrieval rate, LM tokens and / or seconds per question) — the highest quality
  among the points within every budget given, ties to the cheaper: "the best I can have retrieving for at most half
  the questions". Without a point within the budget, the cheapest one, flagged.

**The interval guard.** A router is preferred to Always-RAG *for its quality* only when the paired interval says
so: when a rule would ship a router that decides (τ ≤ 1) because it scores above Always-RAG — ``best_quality``, or
``max_quality_under`` with Always-RAG within the budget — the 90 % paired BCa bootstrap interval of (router −
Always-RAG) over the fit split's questions (out of fold) must lie above 0; otherwise the same router is shipped at
τ > 1, which retrieves for every question and computes no feature (it *is* Always-RAG), and the pick says why.
``cheapest_within`` ships a router for its cost, never for a quality claim, and needs no guard.

Every pick carries ``reason``: why it won, in words, which the report prints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from workbench.classify.threshold import ABOVE_ONE
from workbench.core.errors import ConfigError
from workbench.metrics.bootstrap import mean_interval
from workbench.routing.cost import scalar_cost
from workbench.routing.front import RoutePoint

PICK_RULES = ("cheapest_within", "best_quality", "max_quality_under")
"""The rules a user can pick a router by (module docstring)."""

BUDGETS = ("max_retrieval_rate", "max_tokens", "max_seconds")
"""The budgets of ``max_quality_under``: a retrieval rate, LM tokens or seconds per question."""

TOLERANCE = 1e-12


@dataclass(frozen=True)
class PickRule:
    """A pick rule and its parameters: ``epsilon`` for ``cheapest_within`` (0.01 = one point of the routed score);
    the budgets for ``max_quality_under`` (None: no such budget; at least one is needed). Build a checked one with
    :func:`pick_rule`."""

    rule: str = "cheapest_within"
    epsilon: float = 0.01
    max_retrieval_rate: float | None = None
    max_tokens: float | None = None
    max_seconds: float | None = None

    def budgets(self) -> dict[str, float]:
        """The budgets given, by name."""
        return {name: float(getattr(self, name)) for name in BUDGETS if getattr(self, name) is not None}

    def within_budget(self, point: RoutePoint) -> bool:
        """Whether ``point`` meets every budget given (tokens and seconds per question from its cost fields)."""
        checks = {
            "max_retrieval_rate": point.rate,
            "max_tokens": scalar_cost(point.cost, "tokens"),
            "max_seconds": scalar_cost(point.cost, "seconds"),
        }
        return all(checks[name] <= limit + TOLERANCE for name, limit in self.budgets().items())

    def describe(self) -> str:
        """The rule in words, e.g. ``max quality with retrieval rate ≤ 0.5``."""
        if self.rule == "cheapest_within":
            return f"cheapest within {points_text(self.epsilon)} of Always-RAG"
        if self.rule == "best_quality":
            return "best quality"
        words = {"max_retrieval_rate": "retrieval rate", "max_tokens": "LM tokens / q", "max_seconds": "seconds / q"}
        return "max quality with " + " and ".join(f"{words[k]} ≤ {v:g}" for k, v in self.budgets().items())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the rule and the parameters it reads."""
        out: dict[str, Any] = {"rule": self.rule}
        if self.rule == "cheapest_within":
            out["epsilon"] = self.epsilon
        if self.rule == "max_quality_under":
            out.update(self.budgets())
        return out


def pick_rule(
    rule: str,
    *,
    epsilon: float = 0.01,
    max_retrieval_rate: float | None = None,
    max_tokens: float | None = None,
    max_seconds: float | None = None,
    names: Mapping[str, str] | None = None,
) -> PickRule:
    """A checked :class:`PickRule`. ConfigError (``where``: the parameter's name in ``names`` — recipe keys or
    command-line flags — else its own) for an unknown rule, ε outside [0, 1], a negative budget or a retrieval-rate
    budget above 1, ``max_quality_under`` without a budget, or a budget given to another rule (it would be
    ignored)."""
    names = dict(names or {})

    def where(name: str) -> str:
        return names.get(name, name)

    if rule not in PICK_RULES:
        raise ConfigError(f"unknown pick rule {rule!r} (known: {', '.join(PICK_RULES)})", where("rule"))
    if not (isinstance(epsilon, int | float) and 0.0 <= float(epsilon) <= 1.0):
        raise ConfigError(f"must be a number in [0, 1], got {epsilon!r}", where("epsilon"))
    budgets = {"max_retrieval_rate": max_retrieval_rate, "max_tokens": max_tokens, "max_seconds": max_seconds}
    for name, value in budgets.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise ConfigError(f"must be a number >= 0 or null, got {value!r}", where(name))
        if name == "max_retrieval_rate" and value > 1.0:
            raise ConfigError(f"a retrieval rate is at most 1, got {value!r}", where(name))
        if rule != "max_quality_under":
            raise ConfigError(f"only max_quality_under reads a budget, and the rule is {rule}", where(name))
    if rule == "max_quality_under" and all(v is None for v in budgets.values()):
        raise ConfigError(
            f"max_quality_under needs a budget: {', '.join(where(n) for n in BUDGETS)} (one or more)", where("rule")
        )
    return PickRule(
        rule,
        float(epsilon),
        *(None if budgets[name] is None else float(budgets[name]) for name in BUDGETS),
    )


@dataclass
class Pick:
    """The point a rule picked: ``met`` — whether the rule's condition held (within ε; within the budget; always
    True for ``best_quality``); ``reason`` — why it won, in words; ``guard`` — the interval guard's record when it
    was consulted (the candidate, its difference from Always-RAG, the paired interval, whether Always-RAG was
    kept)."""

    point: RoutePoint
    rule: PickRule
    met: bool
    reason: str
    guard: dict[str, Any] | None = None
    candidates: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``router.json``'s ``pick``)."""
        return {
            **self.rule.to_dict(),
            "describe": self.rule.describe(),
            "met": self.met,
            "reason": self.reason,
            "guard": self.guard,
            "candidates": self.candidates,
        }


def cheapest_within(points: Sequence[RoutePoint], always_quality: float, epsilon: float) -> tuple[RoutePoint, bool]:
    """The cheapest of ``points`` with quality ≥ ``always_quality − epsilon`` (ties: higher quality, then the
    first); without one, the best-quality point (ties: the cheaper). Returns ``(point, within)``. ValueError on
    no points."""
    if not points:
        raise ValueError("no router to pick from")
    ok = [p for p in points if p.quality >= always_quality - epsilon - TOLERANCE]
    if ok:
        return min(ok, key=lambda p: (p.scalar, -p.quality)), True
    return _best(points), False


def _best(points: Sequence[RoutePoint]) -> RoutePoint:
    """The highest-quality point, ties to the cheaper, then the first."""
    return max(points, key=lambda p: (p.quality, -p.scalar))


def pick_router(
    points: Sequence[RoutePoint],
    always: RoutePoint,
    rule: PickRule,
    *,
    paired: Callable[[RoutePoint], np.ndarray] | None = None,
    draws: int = 2000,
    seed: int = 0,
    unit: str = "tokens",
) -> Pick:
    """Apply ``rule`` to the single-step ``points`` (module docstring); ``always`` is Always-RAG on the same
    questions. ``paired(point)``: the per-question difference (routed − Always-RAG) of a point, for the interval
    guard (``draws`` resamples, seeded); without it a router is never preferred to Always-RAG for its quality.
    ``unit`` names the cost in the reason. ValueError when there is no single-step point."""
    single = [p for p in points if p.kind == "single"]
    if not single:
        raise ValueError("no single-step router to pick from")
    a_q, n = always.quality, len(single)
    cost = _cost_words(unit)
    if rule.rule == "cheapest_within":
        point, within = cheapest_within(single, a_q, rule.epsilon)
        if within:
            reason = (
                f"the cheapest of the {_count(single, a_q, rule.epsilon)} router points (of {n}) whose routed score "
                f"is within {points_text(rule.epsilon)} of Always-RAG's {a_q:.3f}: {point.quality:.3f} at "
                f"{cost(point.scalar)} per question, against Always-RAG's {cost(always.scalar)}"
            )
        else:
            reason = (
                f"no router point (of {n}) came within {points_text(rule.epsilon)} of Always-RAG's {a_q:.3f}: the "
                f"best-quality one, {point.quality:.3f}"
            )
        return Pick(point, rule, within, reason, candidates=n)
    if rule.rule == "best_quality":
        pool, met, what = single, True, f"the highest routed score of the {n} router points"
    else:
        pool = [p for p in single if rule.within_budget(p)]
        met, what = bool(pool), f"the highest routed score of the {len(pool)} router points (of {n}) within the budget"
        if not pool:
            point = min(single, key=lambda p: (p.scalar, -p.quality))
            reason = f"no router point (of {n}) meets the budget ({rule.describe()}): the cheapest one"
            return Pick(point, rule, False, reason, candidates=n)
    point = _best(pool)
    reason = f"{what}: {point.quality:.3f} at retrieval rate {point.rate:.2f} and {cost(point.scalar)} per question"
    fallback = _always_point(single, point, always)
    claims = point.tau is not None and point.tau <= 1.0 and point.quality > a_q + TOLERANCE
    if not claims or not (rule.rule == "best_quality" or rule.within_budget(fallback)):
        if point.tau is not None and point.tau > 1.0:
            reason += " (it retrieves for every question: Always-RAG)"
        return Pick(point, rule, met, reason, candidates=len(pool))
    guard = _guard(point, a_q, paired, draws, seed)
    if guard["passed"]:
        lo, hi = guard["interval"]
        reason += (
            f"; it beats Always-RAG's {a_q:.3f} by {100 * guard['difference']:+.1f} points and the 90% paired "
            f"interval ({100 * lo:+.1f} – {100 * hi:+.1f}) lies above 0"
        )
        return Pick(point, rule, met, reason, guard, len(pool))
    reason = (
        f"{what} was `{point.name}` at τ = {point.tau:.3f} ({point.quality:.3f}), "
        f"{100 * (point.quality - a_q):+.1f} points above Always-RAG's {a_q:.3f}, but "
        + (
            "its 90% paired interval ({:+.1f} – {:+.1f}) does not lie above 0".format(
                *(100 * v for v in guard["interval"])
            )
            if guard["interval"] is not None
            else "no paired interval could be computed"
        )
        + ": Always-RAG is kept (the router at τ > 1, which computes no feature)"
    )
    return Pick(fallback, rule, met, reason, guard, len(pool))


def _guard(
    point: RoutePoint, always_quality: float, paired: Callable[[RoutePoint], np.ndarray] | None, draws: int, seed: int
) -> dict[str, Any]:
    """The interval guard's record for ``point``: passed iff the paired interval's low end is above 0."""

    record: dict[str, Any] = {
        "candidate": point.name,
        "tau": point.tau,
        "difference": point.quality - always_quality,
        "interval": None,
        "passed": False,
    }
    if paired is None:
        return record
    diff = np.asarray(paired(point), dtype=float)
    interval = mean_interval(diff, n_resamples=draws, seed=seed)
    if math.isfinite(interval.low) and math.isfinite(interval.high):
        record["interval"] = [interval.low, interval.high]
        record["passed"] = bool(interval.low > 0.0)
    return record


def _always_point(single: Sequence[RoutePoint], candidate: RoutePoint, always: RoutePoint) -> RoutePoint:
    """``candidate``'s router at τ > 1 (it retrieves for every question and costs exactly Always-RAG): its own
    point when the sweep has one, else one made from Always-RAG's figures."""
    for p in single:
        if p.spec == candidate.spec and p.tau is not None and p.tau > 1.0:
            return p
    return replace(
        candidate,
        quality=always.quality,
        rate=1.0,
        scalar=always.scalar,
        cost=dict(always.cost),
        tau=ABOVE_ONE,
        extra={},
    )


def _count(points: Sequence[RoutePoint], always_quality: float, epsilon: float) -> int:
    return sum(p.quality >= always_quality - epsilon - TOLERANCE for p in points)


def points_text(epsilon: float) -> str:
    """ε as points of the routed score, for reports: ``1 point``, ``0.5 points``."""
    value = 100 * epsilon
    return f"{value:g} point" + ("" if value == 1 else "s")


def _cost_words(unit: str) -> Callable[[float], str]:
    words = {"tokens": ("LM tokens", 0), "seconds": ("seconds", 3), "lm_calls": ("LM calls", 2)}[unit]
    return lambda value: f"{value:.{words[1]}f} {words[0]}"
