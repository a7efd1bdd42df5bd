"""Choosing the router a run ships: search, pick on the fit split, measure on the evaluation split.

:func:`choose_router` runs forward selection (always: it is cheap and seeds the study) and, with
``search = "study"``, the Optuna study; applies the pick rule to the single-step points (out of fold on the fit
split); fits the picked router on the whole fit split; and routes the evaluation split with it, comparing it with
Always-RAG by paired bootstrap intervals. The result is JSON-ready (``router.json``); the fitted router is what
the bundle ships.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workbench.routing.candidates import FittedRouter, RouterSpec, RoutingData, fit_router
from workbench.routing.cost import CostModel
from workbench.routing.front import RoutePoint, compare_to_always, pareto, pick
from workbench.routing.search import decision_cost, forward_selection, router_study


@dataclass(frozen=True)
class RouterSearch:
    """How routers are searched and picked (the ``classify`` recipe keys of the same names)."""

    search: str = "forward"
    delta: float = 0.01
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
        from workbench.routing.search import spec_points

        points += spec_points(template, fit, fit_model, "fallback")
    references = baseline_points(fit, fit_model)
    always_q = references[1].quality
    picked, within = pick(points, always_q, settings.delta)
    spec = RouterSpec.from_dict(picked.spec or {})
    router = fit_router(spec, fit, float(picked.tau if picked.tau is not None else 0.5))

    # the evaluation split: the shipped router, its cost per question, against Always-RAG
    p_eval = router.proba(evaluation.columns(spec.features))
    retrieve = p_eval < router.tau
    features_cost = decision_cost(eval_model.features_cost(spec.features), router.tau)
    retrieval_scalar = eval_model.scalar(eval_model.retrieval.as_cost())
    per_question = eval_model.scalar(features_cost) + retrieve.astype(float) * retrieval_scalar
    comparison = compare_to_always(
        evaluation.routed_scores(retrieve),
        evaluation.qa_rag,
        per_question,
        retrieval_scalar,
        draws=settings.bootstrap,
        seed=seed,
    )
    comparison["rate"] = float(retrieve.mean()) if evaluation.n else math.nan
    comparison["cost_fields"] = eval_model.routed(features_cost, comparison["rate"])
    # pays for itself: within Δ where it was picked (fit split, out of fold), and — measured once on the evaluation
    # split — cheaper than Always-RAG without losing more than Δ there
    comparison["within_delta"] = bool(comparison["difference"] >= -settings.delta - 1e-12)
    # strictly cheaper: a router that retrieves for every question (τ > 1) costs Always-RAG exactly, whatever the
    # floating-point sums say
    cheaper = router.tau <= 1.0 and comparison["cost"] < comparison["always_cost"] * (1.0 - 1e-9)
    pays = bool(within and comparison["within_delta"] and cheaper)
    eval_refs = baseline_points(evaluation, eval_model)
    front = pareto([p for p in points if p.kind in ("single", "cascade")])
    best_cascade = _best_cascade(points, always_q, settings.delta)
    deciding = [p for p in points if p.kind == "single" and p.tau is not None and p.tau <= 1.0]
    best_deciding = pick(deciding, always_q, settings.delta)[0] if deciding else None
    record = {
        "search": settings.search,
        "unit": fit_model.unit,
        "delta": settings.delta,
        "features": list(fit.names),
        "forward_path": [s.to_dict() for s in steps],
        "study": study,
        "picked": {**picked.to_dict(), "within_delta": within},
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


def _best_cascade(points: list[RoutePoint], always_quality: float, delta: float) -> RoutePoint | None:
    """The cheapest cascade within ``delta`` of Always-RAG (the best-quality one without any), for the report."""
    cascades = [p for p in points if p.kind == "cascade"]
    if not cascades:
        return None
    ok = [p for p in cascades if p.quality >= always_quality - delta - 1e-12]
    if ok:
        return min(ok, key=lambda p: (p.scalar, -p.quality))
    return max(cascades, key=lambda p: (p.quality, -p.scalar))
