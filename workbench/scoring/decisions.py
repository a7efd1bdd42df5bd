"""P(correct) and each method's retrieval decision for a scored record, from a loaded bundle, through what the
methods declare in their :class:`~workbench.methods.spec.MethodSpec` (no method is named here, nothing is
re-implemented):

* a method that decides with the bundle's decision policy (D²-RAG): :meth:`workbench.runtime.Runtime.decide` —
  calibrators, classifier and τ — on the scored features;
* a method with its own rule on a score the stats graph gives (DTR): ``decide`` over its ``decision_score``;
* a method that decides the same for every question (No-RAG, Standard RAG): its ``fixed_retrieve``;
* a method that decides from the record itself (DENSE-RAG's triage of the record's ``contexts``, InSemRAG's
  controller on its question): its ``record_decision``, on the method the runtime builds (the same object and
  functions the runtime's answers use);
* any other: ``{"retrieve": null, "reason": ...}``, as is every decision whose inputs the record lacks.

SePer exports no method (ΔSePer reads the gold answer: it never reaches a bundle), so it has no decision here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from workbench.core.errors import ConfigError, WorkbenchError
from workbench.methods.registry import METHOD_TABLE, uses_decision_policy

NOT_FROM_FEATURES = "decides inside its own answering pipeline, not from the scored features"
"""The reason of a method whose decision a scored record cannot give."""

NO_RECORD = "decides from the record itself: no record given"
"""The reason of a record-level decision asked without its record."""

GOLD = "reads the gold answer (evaluation only): it decides nothing for a logged answer"
"""The reason of a method that reads the gold answer."""


def decision_features(runtime: Any) -> tuple[str, ...]:
    """The features the bundle's decision policy reads (empty without one)."""
    return tuple(runtime.policy.features) if runtime.policy is not None else ()


def decision_stats(runtime: Any, methods: Sequence[str] | None = None) -> frozenset[str]:
    """The stats the decision scores of the bundle's ``methods`` (default all) read (``MethodSpec.decision_stats``)."""
    names = chosen_methods(runtime, methods)
    return frozenset(s for m in names if _rule(m) is not None for s in METHOD_TABLE[m].decision_stats)


def _rule(method: str) -> Any:
    """The spec of ``method`` when it decides by its own rule on a score the stats graph gives, else None."""
    spec = METHOD_TABLE.get(method)
    if spec is None or uses_decision_policy(method) or spec.decide is None or spec.decision_score is None:
        return None
    return spec


def _from_record(runtime: Any, method: str, record: Any) -> dict[str, Any]:
    """``method``'s ``record_decision`` for ``record`` (a :class:`~workbench.scoring.records.ScoreRecord`) on the
    method the runtime builds; null with the reason when the record lacks a field it needs or the method cannot be
    built (a served model without a capability it needs, a distilled controller the bundle does not carry)."""
    spec = METHOD_TABLE[method]
    if record is None:
        return {"retrieve": None, "reason": NO_RECORD}
    lacking = [name for name in spec.record_needs if getattr(record, name, None) is None]
    if lacking:
        return {"retrieve": None, "reason": f"needs the record's '{lacking[0]}'"}
    try:
        built = runtime.method(method)
    except WorkbenchError as exc:
        return {"retrieve": None, "reason": f"the bundle cannot build it here: {exc}"}
    assert spec.record_decision is not None
    return dict(spec.record_decision(built, record.question, record.contexts))


def method_decision(runtime: Any, method: str, stats: Mapping[str, Any], record: Any) -> dict[str, Any]:
    """The decision of ``method`` (not one deciding with the bundle's policy) for one record: its own rule on its
    score's ``stats``, its fixed decision, or its decision from the ``record``; null with a reason otherwise."""
    spec = METHOD_TABLE.get(method)
    if spec is None:
        return {"retrieve": None, "reason": NOT_FROM_FEATURES}
    if spec.gold:
        return {"retrieve": None, "reason": GOLD}
    if _rule(method) is not None:
        assert spec.decision_score is not None and spec.decide is not None
        settings = runtime.method_configs[method].settings
        if not all(s in stats for s in spec.decision_stats):
            return {"retrieve": None, "reason": "its score's stats could not be computed"}
        score = float(spec.decision_score(stats, settings))
        return {"retrieve": bool(spec.decide(score, settings.tau)), "score": score, "tau": float(settings.tau)}
    if spec.fixed_retrieve is not None:
        return {"retrieve": bool(spec.fixed_retrieve), "fixed": True}
    if spec.record_decision is not None:
        return _from_record(runtime, method, record)
    return {"retrieve": None, "reason": NOT_FROM_FEATURES}


def bundle_decider(runtime: Any, methods: Sequence[str] | None = None) -> Callable[..., dict[str, Any]]:
    """``(features, stats, record=None) -> {"p_correct": ..., "decisions": {method: ...}}`` for the bundle loaded as
    ``runtime``: the decisions of ``methods`` (:func:`chosen_methods`; default every method of the bundle — some run
    the bundle's models per record, e.g. InSemRAG's controller, so a caller that needs only the policy's names it).

    A method that decides with the policy gets ``{"retrieve": P(correct) < τ, "tau": τ, "imputed": [...]}`` (NaN
    features are imputed by the policy's calibrators, as at answer time, and named); the others
    :func:`method_decision`'s. ``p_correct`` is null when the bundle has no decision policy."""
    names = chosen_methods(runtime, methods)
    policy_methods = [m for m in names if uses_decision_policy(m)]
    features = decision_features(runtime)

    def decide(values: dict[str, float], stats: Mapping[str, Any], record: Any = None) -> dict[str, Any]:
        decisions = {m: method_decision(runtime, m, stats, record) for m in names if m not in policy_methods}
        if runtime.policy is None:
            decisions.update({m: {"retrieve": None, "reason": NOT_FROM_FEATURES} for m in policy_methods})
            return {"p_correct": None, "decisions": {m: decisions[m] for m in names}}
        raw = {f: (None if math.isnan(values[f]) else float(values[f])) for f in features}
        made = runtime.decide(raw)
        for method in policy_methods:
            decisions[method] = {
                "retrieve": bool(made.retrieve),
                "tau": float(runtime.policy.tau),
                "imputed": list(made.imputed),
            }
        return {"p_correct": float(made.p_correct), "decisions": {m: decisions[m] for m in names}}

    return decide


def chosen_methods(runtime: Any, methods: Sequence[str] | None) -> tuple[str, ...]:
    """``methods`` in the bundle's order (None: all of the bundle's); ConfigError (``--methods``) naming any the
    bundle does not ship."""
    if methods is None:
        return tuple(runtime.methods)
    unknown = [m for m in methods if m not in runtime.methods]
    if unknown:
        raise ConfigError(f"the bundle ships no {unknown}: it has {list(runtime.methods)}", "--methods")
    return tuple(m for m in runtime.methods if m in methods)
