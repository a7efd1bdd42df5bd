"""Finding routers worth shipping: greedy forward selection (the fast default) and an Optuna multi-objective study.

Both replay the collected features of the fit split (nothing is generated) and return :class:`~workbench.routing.
front.RoutePoint` lists for the pick rule.

**Forward selection** (:func:`forward_selection`) grows a feature set one feature at a time, each time adding the
feature with the largest gain per cost — the increase of the out-of-fold AUROC of P(correct) divided by the cost
the feature adds (its stats not already paid for; a feature whose stats are already paid costs a token ε, so free
gains come first) — and stops when no feature raises the AUROC. Every set on the path is swept over τ.

**The study** (:func:`router_study`) searches feature subsets, classifier kind, inputs (calibrated / raw),
calibrator kind, τ and — with ``cascades`` — two-step routers (:mod:`~workbench.routing.cascade`: the band edges
``band_low`` / ``band_high`` and the cheap step's features, those among the chosen ones that ride on the greedy
answer) with Optuna's multi-objective TPE sampler: routed quality up, cost per question down. The study lives in an
SQLite storage beside the stage's outputs, so ``optuna trials`` / ``optuna-dashboard`` open it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workbench.metrics.ranking import auroc
from workbench.routing.candidates import RouterSpec, RoutingData
from workbench.routing.cascade import cascade_features_cost, cascade_route, cheap_features
from workbench.routing.cost import CostModel
from workbench.routing.front import RoutePoint, tau_sweep


def spec_points(spec: RouterSpec, data: RoutingData, model: CostModel, origin: str) -> list[RoutePoint]:
    """``spec`` at every τ that changes its retrieval set (out-of-fold P(correct) on the fit split)."""
    p = data.oof_proba(spec)
    features_cost = model.features_cost(spec.features)
    points = []
    for tau in tau_sweep(p):
        retrieve = p < tau
        rate = float(retrieve.mean())
        cost = model.routed(decision_cost(features_cost, tau), rate)
        points.append(
            RoutePoint(
                spec.label,
                data.quality(retrieve),
                rate,
                model.scalar(cost),
                cost,
                float(tau),
                spec.to_dict(),
                origin=origin,
            )
        )
    return points


def decision_cost(features_cost: dict[str, float], tau: float) -> dict[str, float]:
    """What deciding costs at ``tau``: the features' cost, or nothing when τ > 1 — a router that retrieves for every
    question needs no feature (the method deciding with it computes none at τ > 1), so it costs exactly
    Always-RAG."""
    return {} if tau > 1.0 else features_cost


@dataclass
class ForwardStep:
    """One step of forward selection: the features so far, their out-of-fold AUROC, the cost of their stats and
    the gain per cost that added the last one."""

    features: tuple[str, ...]
    auroc: float
    features_scalar: float
    gain_per_cost: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "features": list(self.features),
            "auroc": round(self.auroc, 6),
            "features_scalar": round(self.features_scalar, 6),
            "gain_per_cost": None if not np.isfinite(self.gain_per_cost) else round(float(self.gain_per_cost), 6),
        }


def forward_selection(
    data: RoutingData, model: CostModel, template: RouterSpec, candidates: Sequence[str]
) -> tuple[list[ForwardStep], list[RoutePoint]]:
    """Greedy forward selection by AUROC gain per added cost; ``template`` gives the kind, inputs and calibrator.
    Returns the path and every τ point of every set on it."""

    chosen: list[str] = []
    remaining = list(candidates)
    current_auc, current_cost = 0.5, model.scalar(model.features_cost([]))
    epsilon = 1e-6 * max(model.scalar(model.retrieval.as_cost()), 1.0)
    steps: list[ForwardStep] = []
    points: list[RoutePoint] = []
    while remaining:
        best: tuple[float, float, float, str] | None = None
        for name in remaining:
            spec = RouterSpec((*chosen, name), template.kind, template.inputs, template.calibrator)
            value = float(auroc(data.oof_proba(spec), data.label))
            if not np.isfinite(value):
                continue
            cost = model.scalar(model.features_cost(spec.features))
            ratio = (value - current_auc) / max(cost - current_cost, epsilon)
            if best is None or ratio > best[0]:
                best = (ratio, value, cost, name)
        if best is None or best[1] <= current_auc + 1e-12:
            break
        ratio, current_auc, current_cost, name = best
        chosen.append(name)
        remaining.remove(name)
        steps.append(ForwardStep(tuple(chosen), current_auc, current_cost, ratio))
        spec = RouterSpec(tuple(chosen), template.kind, template.inputs, template.calibrator)
        points += spec_points(spec, data, model, "forward")
    return steps, points


def router_study(
    data: RoutingData,
    model: CostModel,
    *,
    features: Sequence[str],
    kinds: Sequence[str],
    inputs: Sequence[str],
    calibrators: Sequence[str],
    trials: int,
    seed: int,
    storage: Path,
    cascades: bool = True,
    enqueue: Sequence[RouterSpec] = (),
) -> tuple[list[RoutePoint], dict[str, Any]]:
    """Run the multi-objective study (``trials`` trials, seeded) in ``storage`` (an SQLite file, replaced) and
    return every completed trial as a point (single-step and cascades) and a record of the study. ``enqueue``:
    specs tried first (each at τ 0.5), e.g. the forward selection's path."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage.unlink(missing_ok=True)
    url = f"sqlite:///{storage.resolve()}"
    study = optuna.create_study(
        study_name="router",
        storage=url,
        directions=["maximize", "minimize"],
        sampler=optuna.samplers.TPESampler(seed=seed),
    )
    with warnings.catch_warnings():  # experimental in Optuna 3–4, and what the dashboard labels its axes with
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(["routed_quality", f"cost_{model.unit}"])
    for spec in enqueue:
        params: dict[str, Any] = {f"use:{f}": f in spec.features for f in features}
        params.update(kind=spec.kind, inputs=spec.inputs, tau=0.5)
        if spec.inputs == "calibrated":
            params["calibrator"] = spec.calibrator
        if cascades:
            params["cascade"] = False
        study.enqueue_trial(params, skip_if_exists=True)
    points: dict[int, RoutePoint] = {}

    def objective(trial: Any) -> tuple[float, float]:
        chosen = tuple(f for f in features if trial.suggest_categorical(f"use:{f}", [True, False]))
        kind = trial.suggest_categorical("kind", list(kinds))
        source = trial.suggest_categorical("inputs", list(inputs))
        calibrator = trial.suggest_categorical("calibrator", list(calibrators)) if source == "calibrated" else "raw"
        two_step = bool(trial.suggest_categorical("cascade", [False, True])) if cascades else False
        tau = trial.suggest_float("tau", 0.0, 1.0)
        if not chosen:
            raise optuna.TrialPruned("no feature chosen")
        spec = RouterSpec(chosen, kind, source, calibrator)
        p = data.oof_proba(spec)
        if not two_step:
            retrieve = p < tau
            rate = float(retrieve.mean())
            cost = model.routed(decision_cost(model.features_cost(chosen), tau), rate)
            point = RoutePoint(
                spec.label, data.quality(retrieve), rate, model.scalar(cost), cost, tau, spec.to_dict(), origin="study"
            )
        else:
            cheap = cheap_features(chosen)
            if not cheap or len(cheap) == len(chosen):
                raise optuna.TrialPruned("a cascade needs cheap and expensive features")
            low = trial.suggest_float("band_low", 0.0, 1.0)
            high = trial.suggest_float("band_high", low, 1.0)
            step1 = RouterSpec(cheap, kind, source, calibrator)
            retrieve, band = cascade_route(data.oof_proba(step1), p, low, high, tau)
            rate, band_rate = float(retrieve.mean()), float(band.mean())
            cost = model.routed(cascade_features_cost(model, cheap, chosen, band_rate), rate)
            point = RoutePoint(
                f"cascade[{step1.label} → {spec.label}]",
                data.quality(retrieve),
                rate,
                model.scalar(cost),
                cost,
                tau,
                spec.to_dict(),
                kind="cascade",
                origin="study",
                extra={"cheap": list(cheap), "band": [low, high], "band_rate": band_rate},
            )
        points[trial.number] = point
        trial.set_user_attr("retrieval_rate", point.rate)
        trial.set_user_attr("router", point.name)
        return point.quality, point.scalar

    study.optimize(objective, n_trials=int(trials), show_progress_bar=False)
    record = {
        "storage": url,
        "study_name": "router",
        "trials": len(study.trials),
        "completed": len(points),
        "pareto_trials": sorted(t.number for t in study.best_trials),
        "sampler": f"TPESampler(seed={seed})",
    }
    out = []
    for number, point in sorted(points.items()):
        point.extra = {**point.extra, "trial": number}
        out.append(point)
    return out, record
