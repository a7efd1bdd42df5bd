"""Stage ``classify``: retrieval-decision classifiers on the calibrated features, τ, ONNX, and the routing table.

Reads the ``calibrate`` stage's ``calibrated.json``. The fit split (out-of-fold calibrated features) is divided into
a training and a validation part (stratified, ``classify.val_fraction``). Each kind in ``classify.kinds`` (logistic
regression and the Lightning MLP with binary cross-entropy; k-NN; a decision tree) is fitted over ``classify.seeds``
and scored on validation by PRR; the kind with the best mean PRR is **selected** (ties → logistic), and each kind's
best seed is kept. The validation split thus does early stopping (MLP), model choice and seed choice. The threshold τ
of each classifier (retrieve iff P(correct) < τ) is chosen by ``classify.threshold_rule`` on rows that did none of that:
with ``classify.tau_from: oof`` (the default) on out-of-fold predictions over the whole fit split
(:func:`~workbench.classify.select.out_of_fold_proba`: ``tau_folds`` stratified folds, each predicted by the kind
at its chosen seed refitted on the other folds); with ``tau_from: val`` on the validation predictions (the earlier
behaviour). ``selection.json`` records which split chose what (``roles``). Each single calibrated feature gets its
own τ by the same rule on the whole fit split (a feature has nothing fitted).

On the evaluation split (the first collected split other than the fit split) the **routing table** compares No-RAG,
Always-RAG, Oracle (retrieve iff the closed-book answer is wrong: needs the gold answer, an upper bound), every
single feature and each classifier kind trained (LR, MLP, kNN, Tree): routed EM / F1 / containment, retrieval rate,
decision accuracy (the retrieve decision against "the closed-book answer is wrong"), retrieval calls (RC) and LM
calls (LMC) per question (AdaRAGUE's columns; its In-Accuracy is the containment column), and tokens per question.
Costs:
No-RAG = the greedy closed-book answer; Always-RAG = one answer with passages; Oracle = closed-book + RAG where
retrieved; feature routers = the collection of all features (measured by ``collect``; it includes the closed-book
answer) + RAG where retrieved.

Every classifier trained is saved as a learned artifact (``<kind>.json``: ``logistic.json``, ``mlp.json``,
``knn.json`` with its reference points in ``knn.safetensors``, ``tree.json``), exported to ONNX (``<kind>.onnx``) and
checked against numpy on the evaluation split (max |Δ| recorded; the stage
fails above 1e-5). ``selection.json`` records the chosen kind and every τ (with the rule that chose it). The router
search (:mod:`~workbench.stages.classify.router`) picks the router the run ships by the user's rule
(``classify.pick``), and ``tau_sweep.json`` sweeps the shipped decision's τ on the evaluation split
(:func:`tau_sweep_record`), for the report and ``workbench decide``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from workbench.calibration.oof import stratified_folds
from workbench.classify.onnx_export import export_onnx, run_onnx
from workbench.classify.select import out_of_fold_proba, split_train_val, train_classifiers
from workbench.classify.threshold import choose_threshold
from workbench.core.atomic import atomic_write_json
from workbench.core.errors import DataError
from workbench.methods.learned import CLASSIFIER_KINDS, ROUTER_NAMES, load_learned, save_learned
from workbench.metrics.adaptive import decision_accuracy
from workbench.routing.search import decision_cost
from workbench.routing.sweep import sweep_rows
from workbench.stages.classify.router import cost_model, mlp_config, search_router
from workbench.stages.classify.settings import knn_config_of, tree_config_of
from workbench.stages.context import StageContext
from workbench.uncertainty.stat_costs import load_stat_costs

ONNX_TOLERANCE = 1e-5
QA_SCORES = ("em", "f1", "contains")


def routing_row(name: str, retrieve: np.ndarray, cols: dict[str, np.ndarray], base_calls, base_tokens) -> dict:
    """Routed QA scores, retrieval rate and cost per question for one router (``retrieve``: bool per question) —
    the cost as before per-stat costs existed: ``base_calls`` / ``base_tokens`` per question plus one answer with
    passages where retrieved."""
    r = retrieve.astype(float)
    rag_tokens = cols["rag_prompt_tokens"] + cols["rag_new_tokens"]
    row = _scores(name, retrieve, cols)
    row["lm_calls"] = float((base_calls + r).mean())
    row["tokens"] = float((base_tokens + r * rag_tokens).mean())
    return row


def _scores(name: str, retrieve: np.ndarray, cols: dict[str, np.ndarray]) -> dict[str, Any]:
    """A row's routed QA scores, retrieval rate, decision accuracy (the decision against "the closed-book answer is
    wrong", the Oracle's label) and retrieval calls per question (one retriever call per retrieved question)."""
    rate = float(retrieve.astype(float).mean())
    row: dict[str, Any] = {"router": name, "retrieval_rate": rate}
    for score in QA_SCORES:
        row[score] = float(np.where(retrieve, cols[f"rag_{score}"], cols[f"correct_{score}"]).mean())
    row["decision_accuracy"] = decision_accuracy(retrieve, cols["correct_contains"] < 0.5)
    row["retrieval_calls"] = rate
    return row


def costed_row(name: str, retrieve: np.ndarray, cols: dict[str, np.ndarray], features_cost: dict, model: Any) -> dict:
    """One routing-table row priced by the cost model (:class:`~workbench.routing.cost.CostModel`): the router's
    ``features_cost`` (the stats its features need, each shared piece once) plus the retrieval where it retrieved."""
    row = _scores(name, retrieve, cols)
    cost = model.routed(features_cost, row["retrieval_rate"])
    row["lm_calls"] = cost["lm_calls"]
    row["tokens"] = cost["prefill_tokens"] + cost["decoded_tokens"] + cost["scored_tokens"]
    row["nli_pairs"] = cost["nli_pairs"]
    row["seconds"] = cost["seconds"]
    row["cost"] = model.scalar(cost)
    return row


def routing_table(
    cols: dict[str, np.ndarray],
    routers: dict[str, np.ndarray],
    model: Any = None,
    features_of: dict[str, list[str] | None] | None = None,
) -> list[dict[str, Any]]:
    """Rows No-RAG, Always-RAG, Oracle, then one per router in ``routers`` (name → retrieve mask). With a cost
    ``model``, each router is charged the stats of its own features (``features_of``: router → features); without
    one (a collection without per-stat costs), every router is charged the whole collection. A router whose
    features are None decides nothing (τ > 1: it retrieves for every question) and pays the retrieval only."""
    n = cols["correct_contains"].size
    oracle = cols["correct_contains"] < 0.5
    if model is not None:
        greedy = model.components_cost(["greedy"])
        rows = [
            costed_row("No-RAG", np.zeros(n, dtype=bool), cols, greedy, model),
            costed_row("Always-RAG", np.ones(n, dtype=bool), cols, {}, model),
            costed_row("Oracle", oracle, cols, greedy, model),
        ]
        for name, mask in routers.items():
            features = (features_of or {})[name]
            rows.append(costed_row(name, mask, cols, model.features_cost(features) if features else {}, model))
        return rows
    closed_tokens = cols["closed_prompt_tokens"] + cols["closed_new_tokens"]
    feature_calls = cols["lm_calls"]
    feature_tokens = cols["prefill_tokens"] + cols["decoded_tokens"] + cols["scored_tokens"]
    zero = np.zeros(n)
    rows = [
        routing_row("No-RAG", np.zeros(n, dtype=bool), cols, np.ones(n), closed_tokens),
        routing_row("Always-RAG", np.ones(n, dtype=bool), cols, zero, zero),
        routing_row("Oracle", oracle, cols, np.ones(n), closed_tokens),
    ]
    rows += [routing_row(name, mask, cols, feature_calls, feature_tokens) for name, mask in routers.items()]
    return rows


def tau_sweep_record(
    p_correct: Any, cols: dict[str, np.ndarray], section: Any, model: Any, *, features: list[str], seed: int
) -> dict[str, Any]:
    """The τ sweep of a router's P(correct) on the evaluation split (:func:`~workbench.routing.sweep.sweep_rows`:
    routed ``classify.routed_score`` and retrieval rate at every τ with intervals, ``classify.router_bootstrap``
    resamples), priced by the cost ``model`` in ``classify.cost_unit`` when there is one (its ``features`` decide,
    nothing at τ > 1); with Always-RAG's and No-RAG's score beside it. ``tau_sweep.json``, which the report draws."""

    score = section.routed_score
    closed, rag = cols[f"correct_{score}"], cols[f"rag_{score}"]
    cost = None
    if model is not None:
        features_cost = model.features_cost(features)

        def cost(tau: float, rate: float) -> float:
            return model.scalar(model.routed(decision_cost(features_cost, tau), rate))

    rows = sweep_rows(p_correct, closed, rag, cost=cost, draws=section.router_bootstrap, seed=seed)
    return {
        "score": score,
        "unit": section.cost_unit if model is not None else None,
        "questions": int(closed.size),
        "always_rag": float(rag.mean()) if rag.size else None,
        "no_rag": float(closed.mean()) if closed.size else None,
        "rows": rows,
    }


def run(ctx: StageContext) -> dict[str, Any]:
    """Train, select, threshold, export and route; write the models, ONNX graphs and JSON results."""

    section = ctx.config.classify
    calib_dir = ctx.inputs["calibrate"]
    data = json.loads((calib_dir / "calibrated.json").read_text())
    meta = json.loads((calib_dir / "summary.json").read_text())
    features, fit_split = meta["features"], meta["fit_split"]
    eval_split = meta.get("eval_split") or next((s for s in sorted(data) if s != fit_split), None)
    if eval_split is None or eval_split == fit_split:
        raise DataError("classify needs a collected split besides the fit split to evaluate on", "collect.splits")
    cols = {k: np.asarray(v, dtype=float) for k, v in data[eval_split]["columns"].items()}
    missing = [c for c in ("rag_contains", "rag_prompt_tokens") if c not in cols]
    if missing:
        raise DataError("the routing table needs answers with retrieval: add rag to collect.labels", "classify")

    def matrix(split: str) -> np.ndarray:
        return np.asarray([data[split]["calibrated"][f] for f in features], dtype=float).T

    X_fit, y_fit = matrix(fit_split), np.asarray(data[fit_split]["label"], dtype=float)
    X_eval, y_eval = matrix(eval_split), np.asarray(data[eval_split]["label"], dtype=float)
    train, val = split_train_val(y_fit, section.val_fraction, ctx.config.seed)
    fit_cols = {k: np.asarray(v, dtype=float) for k, v in data[fit_split]["columns"].items()}
    score = f"correct_{section.routed_score}"

    def threshold(p: np.ndarray, y: np.ndarray, idx: np.ndarray) -> Any:
        extra = {}
        if section.threshold_rule == "max_routed_score":
            extra = {"qa_closed": fit_cols[score][idx], "qa_rag": fit_cols[f"rag_{section.routed_score}"][idx]}
        if section.threshold_rule == "target_rate":
            extra = {"target_rate": section.target_rate}
        return choose_threshold(p, y, rule=section.threshold_rule, **extra)

    folds = None
    if section.tau_from == "oof":
        smallest = int(min((y_fit > 0.5).sum(), (y_fit <= 0.5).sum()))
        if smallest < section.tau_folds:
            raise DataError(
                f"tau_from oof needs at least tau_folds={section.tau_folds} questions of each class in the fit split "
                f"{fit_split!r}, got {smallest}: lower classify.tau_folds or set classify.tau_from: val",
                "classify",
            )
        folds = stratified_folds(y_fit, section.tau_folds, ctx.config.seed)

    def fit_kind(kind: str, X: np.ndarray, columns: list[str]) -> dict[str, Any]:
        """``kind`` trained over the seeds on the fit split's calibrated ``columns`` (``X``), and its τ."""
        selection = train_classifiers(
            X[train],
            y_fit[train],
            X[val],
            y_fit[val],
            kinds=(kind,),
            seeds=tuple(section.seeds),
            mlp_config=mlp_config(section),
            feature_names=columns,
            logistic_C=section.logistic_c,
            knn_config=knn_config_of(section),
            tree_config=tree_config_of(section),
        )
        if folds is None:
            choice = threshold(selection.model.predict_proba(X[val]), y_fit[val], val)
        else:
            oof = out_of_fold_proba(
                kind,
                X,
                y_fit,
                folds,
                seed=selection.seed,
                val_fraction=section.val_fraction,
                mlp_config=mlp_config(section),
                feature_names=columns,
                logistic_C=section.logistic_c,
                knn_config=knn_config_of(section),
                tree_config=tree_config_of(section),
            )
            choice = threshold(oof, y_fit, np.arange(y_fit.size))
        return {"selection": selection, "threshold": choice}

    results = {kind: fit_kind(kind, X_fit, features) for kind in section.kinds}
    ranked = sorted(
        results,
        key=lambda k: (
            -(_finite(results[k]["selection"].summary[k].mean_prr)),
            k != "logistic",
        ),
    )
    chosen = ranked[0]

    routers: dict[str, np.ndarray] = {}
    thresholds: dict[str, Any] = {}
    all_fit = np.arange(y_fit.size)
    for j, name in enumerate(features):
        choice = threshold(X_fit[:, j], y_fit, all_fit)
        thresholds[name] = choice.to_dict()
        routers[name] = X_eval[:, j] < choice.tau
    predictions: dict[str, Any] = {
        "label": y_eval.tolist(),
        "features": {f: X_eval[:, j].tolist() for j, f in enumerate(features)},
    }
    parity: dict[str, float] = {}
    names = ROUTER_NAMES
    for kind, result in results.items():
        model = result["selection"].model
        p_eval = model.predict_proba(X_eval)
        routers[names[kind]] = p_eval < result["threshold"].tau
        thresholds[names[kind]] = result["threshold"].to_dict()
        predictions[names[kind]] = p_eval.tolist()
        path = export_onnx(model, ctx.out_dir / f"{kind}.onnx", features)
        parity[kind] = float(np.max(np.abs(run_onnx(path, X_eval) - p_eval))) if len(X_eval) else 0.0
        if parity[kind] > ONNX_TOLERANCE:
            raise DataError(f"ONNX output differs from the {kind} model by {parity[kind]:.2e}", str(path))
        save_learned(model, ctx.out_dir / f"{kind}.json")
        if kind == "logistic":
            predictions["lr_weights"] = model.weights()

    router = search_router(ctx, data, features, fit_split, eval_split)
    features_of = {name: [name] for name in features} | {names[kind]: list(features) for kind in results}
    if router is not None:
        shipped = router["spec"]["features"]
        raw_eval = np.asarray([data[eval_split]["raw"][f] for f in shipped], dtype=float).T
        p_router = _router_proba(ctx.out_dir, raw_eval)
        routers["Router"] = p_router < router["tau"]
        predictions["Router"] = p_router.tolist()
        features_of["Router"] = list(shipped) if router["tau"] <= 1.0 else None  # τ > 1: retrieves, decides nothing
    # AdaRAGUE's estimator × classifier grid: each kind over each single feature, one routing row apiece
    grid_thresholds: dict[str, Any] = {}
    for kind in section.single_feature_kinds:
        for j, name in enumerate(features):
            single = fit_kind(kind, X_fit[:, [j]], [name])
            label = f"{names[kind]}({name})"
            routers[label] = single["selection"].model.predict_proba(X_eval[:, [j]]) < single["threshold"].tau
            grid_thresholds[label] = single["threshold"].to_dict()
            features_of[label] = [name]
    costs = load_stat_costs(ctx.inputs["collect"]) if ctx.inputs.get("collect") is not None else None
    model = cost_model(costs, eval_split, data[eval_split]["columns"], section) if costs is not None else None
    table = routing_table(cols, routers, model, features_of)
    unit = section.cost_unit if model is not None else None
    atomic_write_json(ctx.out_dir / "routing.json", {"split": eval_split, "unit": unit, "rows": table})
    shipped_key = "Router" if router is not None else names[chosen]
    shipped_tau = router["tau"] if router is not None else results[chosen]["threshold"].tau
    sweep = tau_sweep_record(
        predictions[shipped_key],
        cols,
        section,
        model,
        features=router["spec"]["features"] if router is not None else features,
        seed=ctx.config.seed,
    )
    sweep.update(split=eval_split, router=shipped_key, tau=shipped_tau)
    sweep["label"] = router["label"] if router is not None else f"{shipped_key}({' + '.join(features)})"
    atomic_write_json(ctx.out_dir / "tau_sweep.json", sweep)
    atomic_write_json(ctx.out_dir / "predictions.json", predictions)
    atomic_write_json(
        ctx.out_dir / "selection.json",
        {
            "chosen": chosen,
            "features": features,
            "train_rows": int(train.size),
            "val_rows": int(val.size),
            "tau_from": section.tau_from,
            "tau_folds": section.tau_folds if folds is not None else None,
            "roles": _roles(section, fit_split, int(train.size), int(val.size), int(y_fit.size)),
            "eval_split": eval_split,
            "kinds": {k: r["selection"].to_dict() for k, r in results.items()},
            "thresholds": thresholds,
            **({"single_feature_thresholds": grid_thresholds} if grid_thresholds else {}),
            "onnx_max_abs_diff": parity,
            **({"router": router} if router is not None else {}),
        },
    )
    by_name = {row["router"]: row for row in table}
    best = names[chosen]
    return {
        "chosen": chosen,
        "tau": round(results[chosen]["threshold"].tau, 4),
        "routed_contains": round(by_name[best]["contains"], 4),
        "retrieval_rate": round(by_name[best]["retrieval_rate"], 4),
        "onnx_max_abs_diff": max(parity.values()) if parity else 0.0,
        **(
            {"router": router["label"], "router_tau": round(router["tau"], 4), "router_pays": router["pays_for_itself"]}
            if router is not None
            else {}
        ),
    }


def _router_proba(out_dir: Any, raw: np.ndarray) -> np.ndarray:
    """P(correct) of the shipped router (as saved) for raw rows in its feature order."""

    calibrators = load_learned(out_dir / "router_calibrators.json", expect={"calibrator_set"})
    classifier = load_learned(out_dir / "router_classifier.json", expect=CLASSIFIER_KINDS)
    return classifier.predict_proba(calibrators.transform(raw))


def _roles(section: Any, fit_split: str, n_train: int, n_val: int, n_fit: int) -> dict[str, str]:
    """Which rows chose what, in words (``selection.json``'s ``roles``; the report prints them)."""
    val = f"validation ({n_val} of {n_fit} `{fit_split}` questions)"
    tau = (
        f"out-of-fold predictions over all {n_fit} `{fit_split}` questions ({section.tau_folds} folds; each refit "
        "early-stops on its own training part)"
        if section.tau_from == "oof"
        else val
    )
    return {
        "weights": f"training ({n_train} of {n_fit} `{fit_split}` questions)",
        "mlp_early_stopping": val,
        "model_choice": val,
        "seed_choice": val,
        "tau": tau,
        "single_feature_tau": f"all {n_fit} `{fit_split}` questions (a feature has nothing fitted)",
    }


def _finite(value: float) -> float:
    return -math.inf if math.isnan(value) else value
