"""The parent bundle's decision policy as recalibration reads it, and its τ and router refitted on feedback.

A bundle decides: retrieve iff P(correct) < τ, P(correct) from its classifier over its calibrated features
(:class:`~workbench.classify.policy.DecisionPolicy`). ``workbench recalibrate --refit tau`` / ``--refit router`` refit
those two parts on the feedback's fit part the way the ``classify`` stage fitted them, with the settings the bundle
records (:func:`parent_decision`):

* **router** (:func:`refit_router`): the same classifier kind, fitted by the stage's own
  :func:`~workbench.classify.select.train_classifiers` on the refitted calibrators' out-of-fold outputs, split into a
  training and an early-stopping part by the stage's :func:`~workbench.classify.select.split_train_val`. An MLP keeps
  the parent's hyperparameters and seed (its ``learned/classifier.json`` records them); a logistic model takes the
  recipe's ``classify.logistic_c``.
* **τ** (:func:`refit_tau`): :func:`~workbench.classify.threshold.choose_threshold` with the bundle's rule
  (``decision.rule``; ``--tau-rule`` replaces it) on out-of-fold P(correct) of the fit part: the refitted
  calibrators' out-of-fold outputs, through the parent's classifier, or through classifiers of the refitted kind
  fitted on the other folds (:func:`~workbench.classify.select.out_of_fold_proba`, ``classify.tau_folds`` folds) when
  the router is refitted too. ``max_routed_score`` maximises the mean routed label (``label_retrieved`` where
  retrieved, ``label`` where not), so it needs ``label_retrieved`` on every row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from workbench.calibration.calibrator_set import CalibratorSet
from workbench.calibration.oof import stratified_folds
from workbench.classify.knn import KNNConfig
from workbench.classify.mlp import MLPConfig
from workbench.classify.policy import DecisionPolicy, check_tau
from workbench.classify.select import out_of_fold_proba, split_train_val, train_classifiers
from workbench.classify.threshold import RULES, ThresholdChoice, choose_threshold
from workbench.classify.tree import TreeConfig
from workbench.core.errors import ConfigError, DataError
from workbench.methods.learned import CLASSIFIER_KINDS
from workbench.stages.classify.settings import ClassifySection, tree_config_of

REFITS = ("calibrators", "tau", "router")
"""What ``--refit`` may name; the calibrators are refitted always."""


@dataclass(frozen=True)
class ParentDecision:
    """The parent's ``classifier`` (numpy, over calibrated features), ``tau`` and the ``rule`` that chose it, and the
    recipe's classify settings a refit uses: ``target_rate`` (rule ``target_rate``), ``tau_folds``, ``val_fraction``,
    ``logistic_c`` and the k-NN / tree settings (``knn_config``: the parent k-NN's own k; ``tree_config``: the
    recipe's ``tree_max_depth`` / ``tree_min_samples_leaf``)."""

    classifier: Any
    tau: float
    rule: str
    target_rate: float | None = None
    tau_folds: int = 5
    val_fraction: float = 0.3
    logistic_c: float = 1.0
    knn_config: KNNConfig | None = None
    tree_config: TreeConfig | None = None

    def policy(self, calibrators: CalibratorSet, classifier: Any = None, tau: float | None = None) -> DecisionPolicy:
        """The decision with ``calibrators`` and, unless given, the parent's classifier and τ."""
        return DecisionPolicy(
            calibrators,
            self.classifier if classifier is None else classifier,
            self.tau if tau is None else tau,
            self.rule,
        )


def parent_decision(manifest: dict[str, Any], files: Any) -> ParentDecision:
    """The :class:`ParentDecision` of a verified bundle: its ``decision`` block, its classifier read through its
    verified ``files`` (:class:`~workbench.bundle.files.BundleFiles`), and the recipe's ``classify`` settings it
    records (:class:`~workbench.stages.classify.settings.ClassifySection`'s defaults where it records none)."""
    decision = manifest["decision"]
    classifier = files.learned(decision["files"]["classifier"], "decision.files.classifier", CLASSIFIER_KINDS)
    classify = ((manifest.get("recipe") or {}).get("resolved") or {}).get("classify") or {}
    defaults = ClassifySection()
    tree_keys = ("tree_max_depth", "tree_min_samples_leaf")  # a refitted tree grows as the recipe said
    return ParentDecision(
        classifier=classifier,
        tau=check_tau(decision["tau"], "decision.tau"),
        rule=str(decision.get("rule") or ""),
        target_rate=float(classify.get("target_rate", defaults.target_rate)),
        tau_folds=int(classify.get("tau_folds", defaults.tau_folds)),
        val_fraction=float(classify.get("val_fraction", defaults.val_fraction)),
        logistic_c=float(classify.get("logistic_c", defaults.logistic_c)),
        knn_config=KNNConfig(classifier.n_neighbors) if classifier.kind == "knn" else None,
        tree_config=tree_config_of(SimpleNamespace(**{k: classify.get(k, getattr(defaults, k)) for k in tree_keys})),
    )


def check_refit(refit: Sequence[str], decision: ParentDecision | None, where: str = "recalibrate.refit") -> tuple:
    """``refit`` (names, or comma lists of them: ``--refit tau,router``) as the tuple of :data:`REFITS` it names
    (calibrators first); ConfigError on an unknown name, or on τ / router without the parent's decision."""
    refit = [name.strip() for item in refit for name in str(item).split(",") if name.strip()]
    unknown = [r for r in refit if r not in REFITS]
    if unknown:
        raise ConfigError(f"--refit takes {', '.join(REFITS)}; got {unknown[0][:40]!r}", where)
    if decision is None and set(refit) - {"calibrators"}:
        raise ConfigError("refitting tau or the router needs the parent's decision policy", where)
    return tuple(r for r in REFITS if r == "calibrators" or r in refit)


def tau_rule(decision: ParentDecision, rule: str | None, retrieved: np.ndarray | None, where: str) -> str:
    """The rule τ is re-chosen by: ``rule`` when given, else the bundle's. ConfigError when it is no threshold rule
    (a τ a study or ``workbench decide`` set), DataError when ``max_routed_score`` lacks ``label_retrieved``."""
    chosen = rule or decision.rule
    if chosen not in RULES:
        raise ConfigError(
            f"the bundle's tau was set by {chosen or 'an unrecorded rule'!r}, not a threshold rule: name one with "
            f"--tau-rule ({', '.join(RULES)})",
            "recalibrate.tau_rule",
        )
    if chosen == "target_rate" and decision.target_rate is None:
        raise ConfigError("rule target_rate needs a target rate: the bundle records none (--target-rate)", where)
    if chosen == "max_routed_score" and retrieved is None:
        raise DataError(
            "field 'label_retrieved' is needed on every row to re-choose tau by rule max_routed_score (the routed "
            "label it maximises); without it use --tau-rule target_rate or max_f1",
            where,
        )
    return chosen


def refit_router(
    decision: ParentDecision, calibrated: np.ndarray, labels: np.ndarray, features: Sequence[str], seed: int
) -> Any:
    """A classifier of the parent's kind fitted on ``calibrated`` (the fit part's out-of-fold calibrated features)
    and ``labels`` as the classify stage fits it (module docstring)."""
    kind, config, seed = _kind_settings(decision, seed)
    train, val = split_train_val(labels.astype(float), decision.val_fraction, seed)
    selection = train_classifiers(
        calibrated[train],
        labels[train],
        calibrated[val],
        labels[val],
        kinds=(kind,),
        seeds=(seed,),
        mlp_config=config,
        feature_names=list(features),
        logistic_C=decision.logistic_c,
        knn_config=decision.knn_config,
        tree_config=decision.tree_config,
    )
    return selection.model


def oof_p_correct(
    decision: ParentDecision,
    calibrated: np.ndarray,
    labels: np.ndarray,
    features: Sequence[str],
    seed: int,
    *,
    router: bool,
) -> np.ndarray:
    """Out-of-fold P(correct) of the fit part (module docstring): the parent's classifier on ``calibrated``, or, when
    the ``router`` is refitted, classifiers of its kind fitted on the other folds."""
    if not router:
        return np.asarray(decision.classifier.predict_proba(calibrated), dtype=float).reshape(-1)
    kind, config, seed = _kind_settings(decision, seed)
    folds = stratified_folds(labels.astype(float), decision.tau_folds, seed)
    return out_of_fold_proba(
        kind,
        calibrated,
        labels,
        folds,
        seed=seed,
        val_fraction=decision.val_fraction,
        mlp_config=config,
        feature_names=list(features),
        logistic_C=decision.logistic_c,
        knn_config=decision.knn_config,
        tree_config=decision.tree_config,
    )


def refit_tau(
    p_correct: np.ndarray, labels: np.ndarray, retrieved: np.ndarray | None, rule: str, decision: ParentDecision
) -> ThresholdChoice:
    """τ re-chosen by ``rule`` (checked by :func:`tau_rule`) on out-of-fold ``p_correct`` of the fit part."""
    extra: dict[str, Any] = {}
    if rule == "target_rate":
        extra = {"target_rate": decision.target_rate}
    elif rule == "max_routed_score":
        extra = {"qa_closed": labels.astype(float), "qa_rag": np.asarray(retrieved, dtype=float)}
    return choose_threshold(p_correct, labels, rule=rule, **extra)


def _kind_settings(decision: ParentDecision, seed: int) -> tuple[str, MLPConfig | None, int]:
    """The kind, MLP settings and seed a refit of the parent's classifier uses: an MLP's own, else ``seed``."""
    classifier = decision.classifier
    if classifier.kind == "mlp":
        return "mlp", classifier.config, int(classifier.seed)
    return str(classifier.kind), None, seed


def describe_refit(refitted: Sequence[str], parent: str) -> str:
    """The manifest note of what a recalibration refitted and what stays ``parent``'s."""
    kept = [name for name in ("router", "tau") if name not in refitted]
    parts = {"calibrators": "the calibrators", "tau": "tau", "router": "the classifier (router)"}
    done = ", ".join(parts[r] for r in refitted)
    stays = " and ".join(parts[k] for k in kept)
    kept_text = f"{stays} and the held-out metrics are {parent}'s" if kept else f"the held-out metrics are {parent}'s"
    return (
        f"recalibrated from {parent} on labelled feedback (workbench recalibrate): {done} and the decision graph are "
        f"refitted and the monitoring reference is rebuilt from the feedback's fit part; {kept_text}"
    )
