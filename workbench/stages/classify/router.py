"""The ``classify`` stage's router search: the router a run ships, chosen on a cost–quality front.

Reads the calibrate stage's ``calibrated.json`` (raw imputed features, labels and QA columns per split) and the
collect stage's ``stat_costs.json`` (per-question cost of each stats-graph component and of a retrieval), runs
:func:`~workbench.routing.choose.choose_router` and writes, beside the classifiers:

* ``router.json`` — the search (forward path, study record), every point, the front, the pick (``pick``: the user's
  rule, ``classify.pick``, its parameters and why the pick won it) and its measurement on the evaluation split
  against Always-RAG (paired bootstrap intervals), the cost model;
* ``router_calibrators.json`` / ``router_classifier.json`` / ``router.onnx`` — the picked router (learned
  artifacts; the ONNX graph checked against numpy), which D²-RAG's Stage 1 and the bundle use;
* ``router_study.db`` — with ``router_search: study``, the Optuna storage (``optuna trials --storage
  sqlite:///…/router_study.db --study-name router``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from workbench.calibration.oof import stratified_folds
from workbench.classify.mlp import MLPConfig
from workbench.classify.onnx_export import export_onnx, run_onnx
from workbench.core.atomic import atomic_write_json
from workbench.core.errors import DataError
from workbench.methods.learned import load_learned, save_learned
from workbench.routing.candidates import RoutingData
from workbench.routing.choose import RouterSearch, choose_router
from workbench.routing.cost import CostModel, retrieval_cost
from workbench.stages.classify.settings import knn_config_of, pick_rule_of, tree_config_of
from workbench.stages.context import StageContext
from workbench.uncertainty.stat_costs import load_stat_costs

ONNX_TOLERANCE = 1e-5


def mlp_config(section: Any) -> Any:
    """The MLP settings of the ``classify`` section (:class:`~workbench.classify.mlp.MLPConfig`), for the stage's
    classifiers and the router search alike."""

    return MLPConfig(
        hidden_sizes=tuple(section.mlp_hidden_sizes),
        dropout=section.mlp_dropout,
        learning_rate=section.mlp_learning_rate,
        weight_decay=section.mlp_weight_decay,
        max_epochs=section.mlp_max_epochs,
        batch_size=section.mlp_batch_size,
        patience=section.mlp_patience,
    )


def cost_model(costs: dict[str, Any], split: str, columns: dict[str, Any], section: Any) -> Any:
    """The :class:`~workbench.routing.cost.CostModel` of ``split``: collect's measured component costs and the
    retrieval cost model (measured, or the recipe's ``retrieval_seconds`` / ``retrieval_tokens``)."""

    split_costs = (costs.get("splits") or {}).get(split)
    if not split_costs:
        raise DataError(f"stat_costs.json has no costs for split {split!r}", "collect")
    retrieval = retrieval_cost(
        (costs.get("retrieval") or {}).get(split),
        columns,
        seconds=section.retrieval_seconds,
        tokens=section.retrieval_tokens,
    )
    return CostModel(split_costs["per_question"], retrieval, section.cost_unit)


def routing_data(split_data: dict[str, Any], features: list[str], section: Any, seed: int, folds: bool) -> Any:
    """One split of ``calibrated.json`` as :class:`~workbench.routing.candidates.RoutingData`."""

    raw = np.asarray([split_data["raw"][f] for f in features], dtype=float).T.reshape(-1, len(features))
    label = np.asarray(split_data["label"], dtype=float)
    cols = split_data["columns"]
    score = section.routed_score
    return RoutingData(
        tuple(features),
        raw,
        label,
        np.asarray(cols[f"correct_{score}"], dtype=float),
        np.asarray(cols[f"rag_{score}"], dtype=float),
        folds=stratified_folds(label, section.tau_folds, seed) if folds else None,
        seed=seed,
        logistic_c=section.logistic_c,
        mlp_config=mlp_config(section),
        val_fraction=section.val_fraction,
        knn_config=knn_config_of(section),
        tree_config=tree_config_of(section),
    )


ROUTER_FILES = {"calibrators": "router_calibrators.json", "classifier": "router_classifier.json", "onnx": "router.onnx"}
"""The shipped router's files in a directory (classify's output, or a ``workbench decide`` refit)."""


def write_router(out_dir: Path, router: Any, calibrate_set: Any, evaluation: Any) -> float:
    """Write a fitted router's files (:data:`ROUTER_FILES`) into ``out_dir``: its calibrators with the calibrate
    stage's medians and ranges of its features (for imputation), its classifier (learned artifacts) and its ONNX
    graph, checked against numpy on ``evaluation`` (:class:`~workbench.routing.candidates.RoutingData`). Returns
    the largest |Δ|; DataError above :data:`ONNX_TOLERANCE`."""

    shipped = router.calibrator_set(calibrate_set.medians, calibrate_set.ranges)
    save_learned(shipped, out_dir / ROUTER_FILES["calibrators"])
    save_learned(router.classifier, out_dir / ROUTER_FILES["classifier"])
    feats = list(router.spec.features)
    onnx_path = export_onnx(router.classifier, out_dir / ROUTER_FILES["onnx"], feats)
    inputs = shipped.transform(evaluation.columns(feats))
    parity = float(np.max(np.abs(run_onnx(onnx_path, inputs) - router.classifier.predict_proba(inputs))))
    if parity > ONNX_TOLERANCE:
        raise DataError(f"ONNX output differs from the router's classifier by {parity:.2e}", str(onnx_path))
    return parity


def search_router(
    ctx: StageContext, data: dict[str, Any], features: list[str], fit_split: str, eval_split: str
) -> dict[str, Any] | None:
    """Run the router search (None when ``classify.router_search`` is off); write its files; return the
    ``router`` block of ``selection.json``."""

    section = ctx.config.classify
    if section.router_search == "none":
        return None
    collect_dir = ctx.inputs.get("collect")
    costs = load_stat_costs(collect_dir) if collect_dir is not None else None
    if costs is None:
        raise DataError(
            "the router search needs the collection's per-stat costs (stat_costs.json): re-run collect, or set "
            "classify.router_search: none",
            "classify.router_search",
        )

    rule = pick_rule_of(section)
    settings = RouterSearch(
        search=section.router_search,
        pick=rule,
        kinds=tuple(section.router_kinds),
        inputs=tuple(section.router_inputs),
        calibrators=tuple(section.router_calibrators),
        trials=section.router_trials,
        cascades=section.router_cascades,
        bootstrap=section.router_bootstrap,
        calibrator=ctx.config.calibrate.kind,
    )
    seed = ctx.config.seed
    fit = routing_data(data[fit_split], features, section, seed, folds=True)
    evaluation = routing_data(data[eval_split], features, section, seed, folds=False)
    storage = ctx.out_dir / "router_study.db"
    record, router = choose_router(
        fit,
        evaluation,
        cost_model(costs, fit_split, data[fit_split]["columns"], section),
        cost_model(costs, eval_split, data[eval_split]["columns"], section),
        settings,
        seed=seed,
        storage=storage if section.router_search == "study" else None,
    )
    if record.get("study") and getattr(ctx, "run_dir", None) is not None:  # where the storage lands, not the temp dir
        final = (Path(ctx.run_dir) / "stages" / ctx.spec.name / storage.name).resolve()
        record["study"]["storage"] = f"sqlite:///{final}"
    for part, split in (("fit", fit_split), ("eval", eval_split)):
        record["cost_model"][part]["cached_share"] = float(costs["splits"][split].get("cached_share", 0.0))
    calibrate_set = load_learned(Path(ctx.inputs["calibrate"]) / "calibrators.json", expect={"calibrator_set"})
    record["onnx_max_abs_diff"] = write_router(ctx.out_dir, router, calibrate_set, evaluation)
    atomic_write_json(ctx.out_dir / "router.json", record)
    return {
        "spec": router.spec.to_dict(),
        "label": router.spec.label,
        "tau": router.tau,
        "rule": f"router pick ({section.router_search}, {rule.describe()})",
        "files": dict(ROUTER_FILES),
        "pick": record["pick"],
        "within_delta": record["picked"]["within_delta"],
        "pays_for_itself": record["pays_for_itself"],
    }
