"""The transfer stage's router table: every router fitted on the target task itself (in-task) against the run's own
routers fitted on ``data.templates`` (transferred), on the same shifted questions.

The rows are the classify stage's routing-table routers: each calibrated feature against its own τ (the threshold
router), each kind of ``classify.kinds`` over all the calibrated features, and each kind of
``classify.single_feature_kinds`` over each single feature (``kNN(entropy)``, ...). Both sides read the shifted
questions' features through the run's calibrators (a fixed monotone map per feature: the threshold routers do not
depend on it, the classifiers see the inputs they were built for).

* **transferred** — the run's routers as classify fitted them on the ``data.templates`` questions: the threshold
  routers' and each kind's τ from ``selection.json``, the kinds' saved models (``<kind>.json``); the single-feature
  grid's models are not saved, so they are refitted here by classify's own call on its own rows, seeds and settings
  (:func:`transferred_routers`).
* **in-task** — the same routers fitted on the shifted questions, cross-fitted (:func:`in_task_routers`): the
  questions are dealt to ``transfer.in_task_folds`` stratified folds; each fold is decided by a classifier fitted on
  the other folds (:func:`~workbench.classify.select.out_of_fold_proba`, the first of ``classify.seeds``) and by a τ
  chosen by ``classify.threshold_rule`` on the other folds' out-of-fold predictions (:func:`cross_fitted_retrieve`),
  so no question's own label picks its decision.

:func:`compare_routers` gives each router's decision accuracy, routed score and retrieval rate on both sides, and the
in-task − transferred difference of decision accuracy and routed score with a paired 90% BCa interval (the same
resamples of the questions for every figure; :func:`~workbench.metrics.bootstrap.mean_intervals`): how much of the
routing quality is lost by not fitting on the task.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workbench.classify.select import out_of_fold_proba, split_train_val, train_classifiers
from workbench.classify.threshold import choose_threshold
from workbench.core.errors import DataError
from workbench.methods.learned import CLASSIFIER_KINDS, ROUTER_NAMES, load_learned
from workbench.metrics.adaptive import decision_accuracy
from workbench.metrics.bootstrap import mean_intervals
from workbench.stages.classify.router import mlp_config
from workbench.stages.classify.settings import knn_config_of, tree_config_of

Choose = Callable[[np.ndarray, np.ndarray, np.ndarray], float]
"""τ from scores, 0/1 labels (1 = the closed-book answer is right) and the rows' indices (for the routed-score rule)."""


def grid_label(kind: str, feature: str) -> str:
    """The routing-table name of ``kind`` fitted on the single ``feature`` (classify's): e.g. ``kNN(entropy)``."""
    return f"{ROUTER_NAMES[kind]}({feature})"


def classifier_settings(section: Any) -> dict[str, Any]:
    """The keyword settings classify fits its classifiers with (``classify`` section): MLP, logistic, k-NN, tree."""
    return {
        "mlp_config": mlp_config(section),
        "logistic_C": section.logistic_c,
        "knn_config": knn_config_of(section),
        "tree_config": tree_config_of(section),
    }


def threshold_chooser(section: Any, closed: np.ndarray, rag: np.ndarray) -> Choose:
    """τ by ``classify.threshold_rule`` (:func:`~workbench.classify.threshold.choose_threshold`) with its arguments:
    the rows' closed-book / with-passages ``classify.routed_score`` (``closed`` / ``rag``) for ``max_routed_score``,
    ``classify.target_rate`` for ``target_rate``."""

    def choose(p: np.ndarray, y: np.ndarray, idx: np.ndarray) -> float:
        extra: dict[str, Any] = {}
        if section.threshold_rule == "max_routed_score":
            extra = {"qa_closed": closed[idx], "qa_rag": rag[idx]}
        if section.threshold_rule == "target_rate":
            extra = {"target_rate": section.target_rate}
        return float(choose_threshold(p, y, rule=section.threshold_rule, **extra).tau)

    return choose


def cross_fitted_retrieve(scores: np.ndarray, labels: np.ndarray, folds: np.ndarray, choose: Choose) -> np.ndarray:
    """Retrieve (score < τ) per row, each fold's τ chosen by ``choose`` on the rows of the other folds: a row's own
    label never sets the τ that decides it. ``scores``: one P(correct) (or calibrated feature) per row."""
    retrieve = np.zeros(scores.size, dtype=bool)
    for fold in np.unique(folds):
        held = folds == fold
        others = np.flatnonzero(~held)
        retrieve[held] = scores[held] < choose(scores[others], labels[others], others)
    return retrieve


def in_task_routers(
    X: np.ndarray,
    labels: np.ndarray,
    features: Sequence[str],
    *,
    kinds: Sequence[str],
    grid_kinds: Sequence[str],
    folds: np.ndarray,
    choose: Choose,
    seed: int,
    val_fraction: float,
    settings: dict[str, Any],
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """``(routers, unfit)``: name → cross-fitted retrieve mask of every router fitted on these rows (``X``:
    calibrated features, one column per name of ``features``) — the threshold routers, each of ``kinds`` over all
    features, each of ``grid_kinds`` over each feature —, and name → why for a classifier that could not be fitted
    on a fold's training part (a DataError: e.g. too few questions of a class for its validation rows), left out of
    ``routers``. A classifier's P(correct) is out-of-fold (``folds``; the MLP early-stops on ``val_fraction`` of each
    training part), its τ chosen fold by fold (:func:`cross_fitted_retrieve`)."""
    unfit: dict[str, str] = {}

    def classifier(label: str, kind: str, columns: list[int]) -> np.ndarray | None:
        names = [features[j] for j in columns]
        try:
            p = out_of_fold_proba(
                kind,
                X[:, columns],
                labels,
                folds,
                seed=seed,
                val_fraction=val_fraction,
                feature_names=names,
                **settings,
            )
        except DataError as exc:  # small target tasks: one router missing, not the stage
            unfit[label] = exc.what
            return None
        return cross_fitted_retrieve(p, labels, folds, choose)

    fitted: dict[str, np.ndarray | None] = {
        name: cross_fitted_retrieve(X[:, j], labels, folds, choose) for j, name in enumerate(features)
    }
    everything = list(range(len(features)))
    fitted |= {ROUTER_NAMES[kind]: classifier(ROUTER_NAMES[kind], kind, everything) for kind in kinds}
    for kind in grid_kinds:
        fitted |= {grid_label(kind, f): classifier(grid_label(kind, f), kind, [j]) for j, f in enumerate(features)}
    return {name: mask for name, mask in fitted.items() if mask is not None}, unfit


def transferred_routers(
    X: np.ndarray, features: Sequence[str], classify_dir: Path, calibrate_dir: Path, section: Any, seed: int
) -> dict[str, np.ndarray]:
    """Name → retrieve mask of the run's routers (fitted by classify on ``data.templates``) on these rows (``X``:
    calibrated features in ``features``' order): threshold routers and kinds from classify's outputs, the
    single-feature grid refitted as classify fits it (its fit split's calibrated features, training / validation
    rows, seeds and settings; ``seed``: the run's) under its recorded τ."""
    selection = json.loads((classify_dir / "selection.json").read_text())
    thresholds = selection["thresholds"]
    routers = {name: X[:, j] < thresholds[name]["tau"] for j, name in enumerate(features)}
    for kind in selection["kinds"]:
        model = load_learned(classify_dir / f"{kind}.json", expect=CLASSIFIER_KINDS)
        routers[ROUTER_NAMES[kind]] = model.predict_proba(X) < thresholds[ROUTER_NAMES[kind]]["tau"]
    grid = selection.get("single_feature_thresholds") or {}
    if not grid:
        return routers
    data = json.loads((calibrate_dir / "calibrated.json").read_text())
    fit = data[json.loads((calibrate_dir / "summary.json").read_text())["fit_split"]]
    X_fit = np.asarray([fit["calibrated"][f] for f in features], dtype=float).T
    y_fit = np.asarray(fit["label"], dtype=float)
    train, val = split_train_val(y_fit, section.val_fraction, seed)
    for kind in section.single_feature_kinds:
        for j, name in enumerate(features):
            label = grid_label(kind, name)
            if label not in grid:
                continue
            model = train_classifiers(
                X_fit[train][:, [j]],
                y_fit[train],
                X_fit[val][:, [j]],
                y_fit[val],
                kinds=(kind,),
                seeds=tuple(section.seeds),
                feature_names=[name],
                **classifier_settings(section),
            ).model
            routers[label] = model.predict_proba(X[:, [j]]) < grid[label]["tau"]
    return routers


def _side(retrieve: np.ndarray, closed: np.ndarray, rag: np.ndarray, wrong: np.ndarray) -> dict[str, float]:
    return {
        "decision_accuracy": decision_accuracy(retrieve, wrong),
        "routed": float(np.where(retrieve, rag, closed).mean()),
        "retrieval_rate": float(retrieve.mean()),
    }


def compare_routers(
    in_task: dict[str, np.ndarray],
    transferred: dict[str, np.ndarray],
    closed: np.ndarray,
    rag: np.ndarray,
    *,
    draws: int,
    seed: int,
) -> list[dict[str, Any]]:
    """One row per router of ``in_task`` (its order), after No-RAG, Always-RAG and the oracle: ``in_task`` and
    ``transferred`` figures (decision accuracy against "the closed-book answer is wrong" — ``closed`` < 0.5 —, the
    routed score — ``rag`` where retrieved, else ``closed`` —, the retrieval rate; ``transferred`` None for a router the
    run lacks), and the in-task − transferred ``difference`` of decision accuracy and routed score with its paired BCa
    ``intervals`` (``draws`` resamples, ``seed``; ``[None, None]`` where undefined)."""
    n = closed.size
    wrong = closed < 0.5
    fixed = {"No-RAG": np.zeros(n, dtype=bool), "Always-RAG": np.ones(n, dtype=bool), "Oracle": wrong}
    rows = [
        {"router": name, "in_task": _side(mask, closed, rag, wrong), "transferred": _side(mask, closed, rag, wrong)}
        for name, mask in fixed.items()
    ]
    paired = [name for name in in_task if name in transferred]
    per_question = []  # per paired router: in-task − transferred, right decisions then routed scores
    for name in paired:
        a, b = in_task[name], transferred[name]
        per_question.append((a == wrong).astype(float) - (b == wrong).astype(float))
        per_question.append(np.where(a, rag, closed) - np.where(b, rag, closed))
    intervals = mean_intervals(np.reshape(per_question, (len(per_question), n)), n_resamples=draws, seed=seed)
    bounds = [i.as_bounds() for i in intervals]
    for name in in_task:
        row: dict[str, Any] = {"router": name, "in_task": _side(in_task[name], closed, rag, wrong)}
        row["transferred"] = _side(transferred[name], closed, rag, wrong) if name in transferred else None
        if name in paired:
            k = 2 * paired.index(name)
            row["difference"] = {
                key: row["in_task"][key] - row["transferred"][key] for key in ("decision_accuracy", "routed")
            }
            row["intervals"] = {"decision_accuracy": bounds[k], "routed": bounds[k + 1]}
        rows.append(row)
    return rows
