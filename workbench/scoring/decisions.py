"""P(correct) and each method's retrieval decision for scored features, from a loaded bundle: its decision policy
(:meth:`workbench.runtime.Runtime.decide`: calibrators, classifier and τ) and each method's own decision rule
(:class:`~workbench.methods.spec.MethodSpec` ``decide`` over its ``decision_score``); nothing is re-implemented."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from workbench.methods.registry import METHOD_TABLE, uses_decision_policy

NOT_FROM_FEATURES = "decides inside its own answering pipeline, not from the scored features"
"""The reason of a method whose decision the stats graph cannot give."""


def decision_features(runtime: Any) -> tuple[str, ...]:
    """The features the bundle's decision policy reads (empty without one)."""
    return tuple(runtime.policy.features) if runtime.policy is not None else ()


def decision_stats(runtime: Any) -> frozenset[str]:
    """The stats the bundle's methods' own decision scores read (``MethodSpec.decision_stats``)."""
    return frozenset(s for m in runtime.methods if _rule(m) is not None for s in METHOD_TABLE[m].decision_stats)


def _rule(method: str) -> Any:
    """The spec of ``method`` when it decides by its own rule on a score the stats graph gives, else None."""
    spec = METHOD_TABLE.get(method)
    if spec is None or uses_decision_policy(method) or spec.decide is None or spec.decision_score is None:
        return None
    return spec


def bundle_decider(runtime: Any) -> Callable[[dict[str, float], Mapping[str, Any]], dict[str, Any]]:
    """``(features, stats) -> {"p_correct": ..., "decisions": {method: ...}}`` for the bundle loaded as ``runtime``.

    A method that decides with the policy gets ``{"retrieve": P(correct) < τ, "tau": τ, "imputed": [...]}`` (NaN
    features are imputed by the policy's calibrators, as at answer time, and named); a method with its own rule on a
    score the stats give (DTR's normalised NLL) ``{"retrieve", "score", "tau"}`` with the bundle's settings; any other
    ``{"retrieve": null, "reason": ...}``. ``p_correct`` is null when the bundle has no decision policy."""
    policy_methods = [m for m in runtime.methods if uses_decision_policy(m)]
    rules = {m: spec for m in runtime.methods if (spec := _rule(m)) is not None}
    features = decision_features(runtime)

    def decide(values: dict[str, float], stats: Mapping[str, Any]) -> dict[str, Any]:
        decisions: dict[str, Any] = {m: {"retrieve": None, "reason": NOT_FROM_FEATURES} for m in runtime.methods}
        for method, spec in rules.items():
            settings = runtime.method_configs[method].settings
            if not all(s in stats for s in spec.decision_stats):
                decisions[method] = {"retrieve": None, "reason": "its score's stats could not be computed"}
                continue
            score = float(spec.decision_score(stats, settings))
            retrieve = bool(spec.decide(score, settings.tau))
            decisions[method] = {"retrieve": retrieve, "score": score, "tau": float(settings.tau)}
        if runtime.policy is None:
            return {"p_correct": None, "decisions": decisions}
        raw = {f: (None if math.isnan(values[f]) else float(values[f])) for f in features}
        made = runtime.decide(raw)
        for method in policy_methods:
            decisions[method] = {
                "retrieve": bool(made.retrieve),
                "tau": float(runtime.policy.tau),
                "imputed": list(made.imputed),
            }
        return {"p_correct": float(made.p_correct), "decisions": decisions}

    return decide
