"""The pick rules on hand-made score tables: cheapest_within, best_quality, max_quality_under, the interval guard."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.core.errors import ConfigError
from workbench.routing.front import RoutePoint
from workbench.routing.pick import PickRule, cheapest_within, pick_router, pick_rule

ALWAYS = RoutePoint("Always-RAG", 0.722, 1.0, 500.0, {"prefill_tokens": 500.0, "seconds": 1.0}, kind="reference")
"""The help-desk case of the issue: Always-RAG scores 0.722 on the fit split, retrieval hurts some questions."""

CONF = {"features": ["confidence"], "kind": "logistic", "inputs": "calibrated", "calibrator": "isotonic"}
ENTROPY = {"features": ["entropy"], "kind": "logistic", "inputs": "calibrated", "calibrator": "isotonic"}


def _point(name: str, quality: float, rate: float, tokens: float, tau: float, spec: dict, seconds: float = 0.5):
    cost = {"prefill_tokens": tokens, "seconds": seconds}
    return RoutePoint(name, quality, rate, tokens, cost, tau, spec)


TABLE = [  # (router, routed score, retrieval rate, LM tokens / q, τ) on the fit split, out of fold
    _point("LR(confidence)", 0.611, 0.00, 100.0, 0.0, CONF),
    _point("LR(confidence)", 0.700, 0.25, 225.0, 0.40, CONF),
    _point("LR(confidence)", 0.715, 0.60, 400.0, 0.70, CONF, seconds=0.9),
    _point("LR(confidence)", 0.722, 1.00, 500.0, 1.0 + 1e-9, CONF, seconds=1.0),
    _point("LR(entropy)", 0.778, 0.50, 350.0, 0.55, ENTROPY, seconds=0.8),
    _point("LR(entropy)", 0.722, 1.00, 500.0, 1.0 + 1e-9, ENTROPY, seconds=1.0),
    RoutePoint("cascade", 0.900, 0.3, 50.0, {}, 0.5, CONF, kind="cascade"),  # measured, never shipped
]


def _paired(diffs: dict[str, np.ndarray]):
    """A paired-difference lookup by router name (what classify replays out of fold)."""
    return lambda point: diffs[point.name]


# per-question routed − Always-RAG, each averaging the table's +0.056 (0.778 − 0.722)
SURE = np.array([1.0] * 5 + [0.0] * 85)  # +1 on 5 of 90 questions, never worse: the interval lies above 0
NOISY = np.array([1.0] * 3 + [-1.0] * 2 + [0.0] * 13)  # the 18 questions, 14 vs 13 right: it spans 0


def test_cheapest_within_takes_the_cheapest_router_within_epsilon_and_says_why():
    chosen = pick_router(TABLE, ALWAYS, pick_rule("cheapest_within", epsilon=0.01))
    assert chosen.point.name == "LR(entropy)" and chosen.point.tau == 0.55 and chosen.met  # 350 tokens
    assert "within 1 point of Always-RAG's 0.722" in chosen.reason and "4 router points (of 6)" in chosen.reason
    assert chosen.guard is None  # picked for its cost, not for a quality claim
    wide = pick_router(TABLE, ALWAYS, pick_rule("cheapest_within", epsilon=0.03))
    assert wide.point.tau == 0.40 and wide.point.scalar == 225.0  # 0.700 ≥ 0.722 − 0.03: the cheapest then
    strict = pick_router(TABLE[:4], ALWAYS, pick_rule("cheapest_within", epsilon=0.0))
    assert strict.point.tau > 1.0  # only retrieving always is within 0 points
    none = pick_router(TABLE, RoutePoint("Always-RAG", 0.95, 1.0, 500.0, {}), PickRule("cheapest_within", 0.01))
    assert not none.met and none.point.quality == 0.778 and "no router point" in none.reason
    assert cheapest_within(TABLE[:2], 0.9, 0.01) == (TABLE[1], False)  # best quality without one within ε


def test_best_quality_ships_the_router_that_beats_always_rag_when_its_interval_says_so():
    chosen = pick_router(TABLE, ALWAYS, PickRule("best_quality"), paired=_paired({"LR(entropy)": SURE}), draws=400)
    assert chosen.point.name == "LR(entropy)" and chosen.point.tau == 0.55 and chosen.met
    low, high = chosen.guard["interval"]
    assert 0.0 < low <= chosen.guard["difference"] <= high and chosen.guard["passed"]
    assert "beats Always-RAG's 0.722 by +5.6 points" in chosen.reason and "lies above 0" in chosen.reason


def test_best_quality_keeps_always_rag_when_the_interval_includes_zero():
    chosen = pick_router(TABLE, ALWAYS, PickRule("best_quality"), paired=_paired({"LR(entropy)": NOISY}), draws=400)
    low, high = chosen.guard["interval"]
    assert chosen.guard["passed"] is False and low <= 0.0 < chosen.guard["difference"] <= high
    # the same router at τ > 1: it retrieves for every question and computes nothing — it is Always-RAG
    assert chosen.point.name == "LR(entropy)" and chosen.point.tau > 1.0 and chosen.point.rate == 1.0
    assert "does not lie above 0" in chosen.reason and "Always-RAG is kept" in chosen.reason
    # without paired scores a router is never preferred to Always-RAG for its quality
    unguarded = pick_router(TABLE, ALWAYS, PickRule("best_quality"))
    assert unguarded.point.tau > 1.0 and unguarded.guard["interval"] is None


def test_max_quality_under_a_retrieval_budget_takes_the_best_router_within_it():
    chosen = pick_router(TABLE, ALWAYS, pick_rule("max_quality_under", max_retrieval_rate=0.3))
    assert chosen.point.tau == 0.40 and chosen.point.rate <= 0.3 and chosen.met and chosen.candidates == 2
    assert chosen.guard is None  # Always-RAG is outside the budget: no quality claim against it
    half = pick_router(TABLE, ALWAYS, pick_rule("max_quality_under", max_retrieval_rate=0.5))
    assert half.point.name == "LR(entropy)" and half.point.tau == 0.55


def test_max_quality_under_token_and_seconds_budgets():
    by_tokens = pick_router(TABLE, ALWAYS, pick_rule("max_quality_under", max_tokens=420.0))
    assert by_tokens.point.name == "LR(entropy)"  # 350 tokens; the 0.60-rate confidence point costs 400, scores less
    by_seconds = pick_router(TABLE, ALWAYS, pick_rule("max_quality_under", max_seconds=0.6))
    assert by_seconds.point.tau == 0.40  # the entropy router takes 0.8 s
    both = pick_router(TABLE, ALWAYS, pick_rule("max_quality_under", max_tokens=420.0, max_retrieval_rate=0.3))
    assert both.point.tau == 0.40
    nothing = pick_router(TABLE, ALWAYS, pick_rule("max_quality_under", max_tokens=10.0))
    assert not nothing.met and nothing.point.scalar == 100.0 and "no router point" in nothing.reason


def test_max_quality_under_a_budget_that_admits_always_rag_is_guarded_too():
    rule = pick_rule("max_quality_under", max_tokens=600.0)
    kept = pick_router(TABLE, ALWAYS, rule, paired=_paired({"LR(entropy)": NOISY}), draws=400)
    assert kept.point.tau > 1.0 and kept.guard is not None and not kept.guard["passed"]
    shipped = pick_router(TABLE, ALWAYS, rule, paired=_paired({"LR(entropy)": SURE}), draws=400)
    assert shipped.point.tau == 0.55


def test_the_always_point_is_made_from_always_rag_when_the_sweep_has_none():
    lone = [_point("LR(entropy)", 0.778, 0.50, 350.0, 0.55, ENTROPY)]
    chosen = pick_router(lone, ALWAYS, PickRule("best_quality"), paired=_paired({"LR(entropy)": NOISY}), draws=300)
    assert chosen.point.tau > 1.0 and chosen.point.quality == ALWAYS.quality and chosen.point.scalar == 500.0
    with pytest.raises(ValueError, match="single-step"):
        pick_router([TABLE[-1]], ALWAYS, PickRule())


@pytest.mark.parametrize(
    ("kwargs", "where", "message"),
    [
        ({"rule": "cheapest"}, "classify.pick", "unknown pick rule"),
        ({"rule": "max_quality_under"}, "classify.pick", "needs a budget"),
        ({"rule": "best_quality", "max_tokens": 300.0}, "classify.pick_max_tokens", "only max_quality_under"),
        ({"rule": "max_quality_under", "max_retrieval_rate": 1.5}, "classify.pick_max_retrieval_rate", "at most 1"),
        ({"rule": "max_quality_under", "max_seconds": -1.0}, "classify.pick_max_seconds", ">= 0"),
        ({"rule": "cheapest_within", "epsilon": 2.0}, "classify.router_delta", r"in \[0, 1\]"),
    ],
)
def test_a_bad_rule_is_refused_naming_the_key(kwargs, where, message):
    from workbench.stages.classify.settings import PICK_KEYS

    rule = kwargs.pop("rule")
    with pytest.raises(ConfigError, match=message) as info:
        pick_rule(rule, names=PICK_KEYS, **kwargs)
    assert info.value.where == where


def test_the_rule_in_words_and_as_json():
    rule = pick_rule("max_quality_under", max_retrieval_rate=0.5, max_seconds=1.2)
    assert rule.describe() == "max quality with retrieval rate ≤ 0.5 and seconds / q ≤ 1.2"
    assert rule.to_dict() == {"rule": "max_quality_under", "max_retrieval_rate": 0.5, "max_seconds": 1.2}
    assert PickRule().describe() == "cheapest within 1 point of Always-RAG"
    assert PickRule("cheapest_within", 0.005).to_dict() == {"rule": "cheapest_within", "epsilon": 0.005}
