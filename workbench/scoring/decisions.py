"""P(correct) and each method's retrieval decision for scored features, from a loaded bundle's own decision policy
(:meth:`workbench.runtime.Runtime.decide`: its calibrators, classifier and τ) — nothing is re-implemented here."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from workbench.methods.registry import uses_decision_policy

NOT_FROM_FEATURES = "decides inside its own answering pipeline, not from the scored features"
"""The reason of a method whose decision the features alone cannot give."""


def decision_features(runtime: Any) -> tuple[str, ...]:
    """The features the bundle's decision policy reads (empty without one)."""
    return tuple(runtime.policy.features) if runtime.policy is not None else ()


def bundle_decider(runtime: Any) -> Callable[[dict[str, float]], dict[str, Any]]:
    """``features -> {"p_correct": ..., "decisions": {method: ...}}`` for the bundle loaded as ``runtime``.

    A method that decides with the policy gets ``{"retrieve": P(correct) < τ, "tau": τ, "imputed": [...]}`` (NaN
    features are imputed by the policy's calibrators, as at answer time, and named); any other method
    ``{"retrieve": null, "reason": ...}``. ``p_correct`` is null when the bundle has no decision policy."""
    policy_methods = [m for m in runtime.methods if uses_decision_policy(m)]
    features = decision_features(runtime)

    def decide(values: dict[str, float]) -> dict[str, Any]:
        decisions: dict[str, Any] = {m: {"retrieve": None, "reason": NOT_FROM_FEATURES} for m in runtime.methods}
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
