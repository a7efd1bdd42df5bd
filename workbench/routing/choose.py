"""Choosing the router a run ships: search, pick on the fit split, measure on the evaluation split.

:func:`choose_router` runs forward selection (always: it is cheap and seeds the study) and, with
``search = "study"``, the Optuna study; applies the user's pick rule (:mod:`workbench.routing.pick`, guarded by
paired intervals over the fit split's out-of-fold routed scores) to the single-step points; fits the picked router
on the whole fit split; and routes the evaluation split with it, comparing it with Always-RAG by paired bootstrap
intervals. The result is JSON-ready (``router.json``); the fitted router is what the bundle ships.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbench.routing.candidates import FittedRouter, RouterSpec, RoutingData, fit_router
from workbench.routing.cost import CostModel
from workbench.routing.front import RoutePoint, compare_to_always, pareto
from workbench.routing.pick import PickRule, cheapest_within, pick_router
from workbench.routing.search import decision_cost, forward_selection, router_study, spec_points


@dataclass(frozen=True)
class RouterSearch:
    """How routers are searched and picked (the ``classify`` recipe keys of the same names; ``pick``: the pick rule,
    whose ε — ``classify.router_delta`` — also says whether a router "pays for itself")."""

    search: str = "forward"
    pick: PickRule = field(default_factory=PickRule)
    kinds: tuple[str, ...] = ("logistic",)
    inputs: tuple[str, ...] = ("calibrated", "raw")
    calibrators: tuple[str, ...] = ("isotonic", "centered_isotonic", "platt")
    trials: int = 100
    cascades: bool = True
    bootstrap: int = 2000
    calibrator: str = "isotonic"


def baseline_points(data: RoutingData, model: CostModel) -> list[RoutePoint]:
    """No-RAG, Always-RAG and the gold Oracle (retrieve iff the closed-book answer is wrong) on ``data``."""
    greedy = model.components_cost(["greedy"])
    never, always = np.zeros(data.n, dtype=bool), np.ones(data.n, dtype=bool)
    oracle = data.label < 0.5
    always_cost = model.routed({}, 1.0)
    oracle_cost = model.routed(greedy, float(oracle.mean()) if data.n else 0.0)
    return [
        RoutePoint(
            "No-RAG", data.quality(never), 0.0, model.scalar(greedy), greedy, kind="reference", origin="reference"
        ),
        RoutePoint(
            "Always-RAG",
            data.quality(always),
            1.0,
            model.scalar(always_cost),
            always_cost,
            kind="reference",
            origin="reference",
        ),
        RoutePoint(
            "Oracle",
            data.quality(oracle),
            float(oracle.mean()) if data.n else 0.0,
            model.scalar(oracle_cost),
            oracle_cost,
            kind="reference",
            origin="reference",
        ),
    ]


def measure_point(
    evaluation: RoutingData,
    p_correct: np.ndarray,
    tau: float,
    features: Sequence[str],
    model: CostModel,
    *,
    delta: float,
    draws: int,
    seed: int,
) -> dict[str, Any]:
    """A router's operating point on the evaluation split — retrieve iff ``p_correct`` < ``tau`` — against
    Always-RAG (:func:`~workbench.routing.front.compare_to_always`: paired intervals of the quality difference and
    the cost saving), with its retrieval ``rate``, its ``cost_fields`` per question, ``within_delta`` (loses at most
    ``delta`` there) and ``beats_always`` (the difference's interval lies above 0). At τ > 1 no feature is computed
    (:func:`~workbench.routing.search.decision_cost`)."""
    retrieve = np.asarray(p_correct, dtype=float) < tau
    features_cost = decision_cost(model.features_cost(features), tau)
    retrieval_scalar = model.scalar(model.retrieval.as_cost())
    per_question = model.scalar(features_cost) + retrieve.astype(float) * retrieval_scalar
    comparison = compare_to_always(
        evaluation.routed_scores(retrieve), evaluation.qa_rag, per_question, retrieval_scalar, draws=draws, seed=seed
    )
    comparison["rate"] = float(retrieve.mean()) if evaluation.n else math.nan
    comparison["cost_fields"] = model.routed(features_cost, comparison["rate"])
    comparison["within_delta"] = bool(comparison["difference"] >= -delta - 1e-12)
    low = comparison["difference_interval"][0]
    comparison["beats_always"] = bool(low is not None and math.isfinite(low) and low > 0.0)
    return comparison


def choose_router(
    fit: RoutingData,
    evaluation: RoutingData,
    fit_model: CostModel,
    eval_model: CostModel,
    settings: RouterSearch,
    *,
    seed: int,
    storage: Path | None = None,
) -> tuple[dict[str, Any], FittedRouter]:
    """Search, pick, fit and measure; returns ``(record, fitted router)``. ``storage``: the study's SQLite file."""
    template = RouterSpec(fit.names, "logistic", "calibrated", settings.calibrator)
    steps, points = forward_selection(fit, fit_model, template, fit.names)
    study: dict[str, Any] | None = None
    if settings.search == "study":
        if storage is None:
            raise ValueError("the router study needs a storage path")
        enqueue = [RouterSpec(s.features, "logistic", "calibrated", settings.calibrator) for s in steps]
        found, study = router_study(
            fit,
            fit_model,
            features=fit.names,
            kinds=settings.kinds,
            inputs=settings.inputs,
            calibrators=settings.calibrators,
            trials=settings.trials,
            seed=seed,
            storage=storage,
            cascades=settings.cascades,
            enqueue=enqueue,
        )
        points += found
    if not any(p.kind == "single" for p in points):  # forward selection found no signal: the full set at every τ
        points += spec_points(template, fit, fit_model, "fallback")
    references = baseline_points(fit, fit_model)
    always_q, delta = references[1].quality, settings.pick.epsilon

    def paired(point: RoutePoint) -> np.ndarray:  # out-of-fold routed − Always-RAG per fit-split question
        spec = RouterSpec.from_dict(point.spec or {})
        return fit.routed_scores(fit.oof_proba(spec) < float(point.tau)) - fit.qa_rag

    chosen = pick_router(
        points, references[1], settings.pick, paired=paired, draws=settings.bootstrap, seed=seed, unit=fit_model.unit
    )
    picked = chosen.point
    within = bool(picked.quality >= always_q - delta - 1e-12)
    spec = RouterSpec.from_dict(picked.spec or {})
    router = fit_router(spec, fit, float(picked.tau if picked.tau is not None else 0.5))

    # the evaluation split: the shipped router, its cost per question, against Always-RAG
    p_eval = router.proba(evaluation.columns(spec.features))
    comparison = measure_point(
        evaluation, p_eval, router.tau, spec.features, eval_model, delta=delta, draws=settings.bootstrap, seed=seed
    )
    # pays for itself: within Δ where it was picked (fit split, out of fold), and — measured once on the evaluation
    # split — cheaper than Always-RAG without losing more than Δ there; strictly cheaper: a router that retrieves
    # for every question (τ > 1) costs Always-RAG exactly, whatever the floating-point sums say
    cheaper = router.tau <= 1.0 and comparison["cost"] < comparison["always_cost"] * (1.0 - 1e-9)
    pays = bool(within and comparison["within_delta"] and cheaper)
    eval_refs = baseline_points(evaluation, eval_model)
    front = pareto([p for p in points if p.kind in ("single", "cascade")])
    cascades = [p for p in points if p.kind == "cascade"]
    best_cascade = cheapest_within(cascades, always_q, delta)[0] if cascades else None
    deciding = [p for p in points if p.kind == "single" and p.tau is not None and p.tau <= 1.0]
    best_deciding = cheapest_within(deciding, always_q, delta)[0] if deciding else None
    record = {
        "search": settings.search,
        "unit": fit_model.unit,
        "delta": delta,
        "pick": chosen.to_dict(),
        "features": list(fit.names),
        "forward_path": [s.to_dict() for s in steps],
        "study": study,
        "picked": {**picked.to_dict(), "within_delta": within, "met": chosen.met},
        "tau": router.tau,
        "spec": spec.to_dict(),
        "fit_references": [p.to_dict() for p in references],
        "eval_references": [p.to_dict() for p in eval_refs],
        "evaluation": comparison,
        "pays_for_itself": pays,
        "best_cascade": best_cascade.to_dict() if best_cascade is not None else None,
        "best_deciding": best_deciding.to_dict() if best_deciding is not None else None,
        "front": [p.to_dict() for p in front],
        "points": [p.to_dict() for p in points],
        "cost_model": {
            "fit": {
                "components": {k: dict(v) for k, v in fit_model.components.items()},
                "retrieval": fit_model.retrieval.to_dict(),
            },
            "eval": {
                "components": {k: dict(v) for k, v in eval_model.components.items()},
                "retrieval": eval_model.retrieval.to_dict(),
            },
        },
    }
    return record, router
