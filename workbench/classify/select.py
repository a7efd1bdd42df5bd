"""Model selection for the retrieval-decision classifier: fit each kind over several seeds, keep the best by PRR.

Each (kind, seed) run is scored on the validation split by the prediction-rejection ratio (confidence = predicted
P(correct), quality = the 0/1 label) and by AUROC. The kind with the highest mean PRR wins (ties go to the logistic
model, the simpler one); its best-seed model is returned.

:func:`out_of_fold_proba` gives every row of the fit split a prediction by a model of the chosen kind and seed that
never saw it, so the decision threshold τ can be chosen on rows that played no part in early stopping, model choice
or seed choice (issue 17: the validation split had been doing all four jobs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.classify.inputs import as_features, as_labels, resolve_feature_names
from workbench.classify.knn import KNNConfig, fit_knn
from workbench.classify.logistic import fit_logistic
from workbench.classify.mlp import MLPConfig, fit_mlp
from workbench.classify.onnx_export import Classifier
from workbench.classify.tree import TreeConfig, fit_tree
from workbench.core.errors import ConfigError
from workbench.metrics.ranking import auroc
from workbench.metrics.rejection import prr

KINDS = ("logistic", "mlp", "knn", "tree")
"""Every classifier kind; only the MLP uses a validation split (early stopping)."""
DEFAULT_KINDS = ("logistic", "mlp")
"""The kinds :func:`train_classifiers` fits unless told otherwise (``classify.kinds``' default)."""


@dataclass(frozen=True)
class RunScore:
    """Validation scores of one fitted (kind, seed) run."""

    kind: str
    seed: int
    prr: float
    auroc: float


@dataclass(frozen=True)
class KindSummary:
    """Mean and population standard deviation (ddof = 0) of a kind's validation scores over its seeds."""

    kind: str
    mean_prr: float
    std_prr: float
    mean_auroc: float
    std_auroc: float


@dataclass(frozen=True)
class SelectionResult:
    """The outcome of :func:`train_classifiers`.

    ``kind``: the chosen kind; ``seed``: the seed of ``model``, the chosen kind's run with the highest validation PRR;
    ``runs``: every run's scores, in fitting order; ``summary``: per-kind mean/std, keyed by kind.
    """

    kind: str
    seed: int
    model: Classifier
    runs: tuple[RunScore, ...]
    summary: dict[str, KindSummary]

    def prr_by_seed(self, kind: str) -> dict[int, float]:
        """Seed → validation PRR for one kind."""
        return {run.seed: run.prr for run in self.runs if run.kind == kind}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready report of the selection (the model itself is not included)."""
        return {
            "kind": self.kind,
            "seed": self.seed,
            "runs": [vars(run).copy() for run in self.runs],
            "summary": {kind: vars(s).copy() for kind, s in self.summary.items()},
        }


def split_train_val(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Index arrays ``(train, val)``: a stratified ``fraction`` of each class goes to validation (≥ 1 of a class with
    at least 2 rows; none of a class with fewer)."""
    rng = np.random.default_rng(seed)
    train, val = [], []
    for value in (0.0, 1.0):
        idx = rng.permutation(np.flatnonzero(labels == value))
        n_val = max(1, round(fraction * idx.size)) if idx.size >= 2 else 0
        val.extend(idx[:n_val].tolist())
        train.extend(idx[n_val:].tolist())
    return np.sort(np.asarray(train, dtype=int)), np.sort(np.asarray(val, dtype=int))


def fit_one(
    kind: str,
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_val: np.ndarray | None,
    y_val: np.ndarray | None,
    *,
    seed: int,
    mlp_config: MLPConfig,
    feature_names: Sequence[str],
    logistic_C: float,
    knn_config: KNNConfig | None = None,
    tree_config: TreeConfig | None = None,
) -> Classifier:
    """One classifier of ``kind`` fitted with ``seed`` (the MLP early-stops on ``X_val`` / ``y_val``; the other
    kinds ignore them). ``knn_config`` / ``tree_config`` default to their classes' defaults."""
    if kind == "logistic":
        return fit_logistic(X_train, y_train, C=logistic_C, seed=seed, feature_names=feature_names)
    if kind == "knn":
        return fit_knn(X_train, y_train, knn_config, seed=seed, feature_names=feature_names)
    if kind == "tree":
        return fit_tree(X_train, y_train, tree_config, seed=seed, feature_names=feature_names)
    return fit_mlp(X_train, y_train, X_val, y_val, mlp_config, seed, feature_names=feature_names)


def out_of_fold_proba(
    kind: str,
    X: object,
    y: object,
    folds: np.ndarray,
    *,
    seed: int,
    val_fraction: float,
    mlp_config: MLPConfig | None = None,
    feature_names: Sequence[str] | None = None,
    logistic_C: float = 1.0,
    knn_config: KNNConfig | None = None,
    tree_config: TreeConfig | None = None,
) -> np.ndarray:
    """P(correct) of every row of ``X`` from a ``kind`` model (``seed``) fitted on the rows of the other folds
    (``folds``: a fold index per row). The MLP early-stops on a stratified ``val_fraction`` of those training rows
    (:func:`split_train_val`), never on the held-out fold. DataError when a training part holds one class only."""
    xt = as_features(X, where="X")
    yt = as_labels(y, xt.shape[0], where="y")
    names = resolve_feature_names(feature_names, xt.shape[1])
    config = mlp_config or MLPConfig()
    settings = {"mlp_config": config, "feature_names": names, "logistic_C": logistic_C}
    settings |= {"knn_config": knn_config, "tree_config": tree_config}  # each kind reads its own
    out = np.full(yt.size, np.nan)
    for fold in np.unique(folds):
        held = folds == fold
        rows = np.flatnonzero(~held)
        x_part, y_part = xt[rows], yt[rows]
        if kind == "mlp":
            train, val = split_train_val(y_part, val_fraction, seed)
            x_stop, y_stop = x_part[val], y_part[val]
            x_part, y_part = x_part[train], y_part[train]
        else:
            x_stop = y_stop = None
        model = fit_one(kind, x_part, y_part, x_stop, y_stop, seed=seed, **settings)
        out[held] = model.predict_proba(xt[held])
    return out


def _score(p_correct: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    return float(prr(p_correct, y)), float(auroc(p_correct, y))


def _key(value: float) -> float:
    """A sort key treating NaN as the worst score."""
    return -math.inf if math.isnan(value) else value


def train_classifiers(
    X_train: object,
    y_train: object,
    X_val: object,
    y_val: object,
    *,
    kinds: Sequence[str] = DEFAULT_KINDS,
    seeds: Sequence[int] = (0, 1, 2),
    mlp_config: MLPConfig | None = None,
    feature_names: Sequence[str] | None = None,
    logistic_C: float = 1.0,
    knn_config: KNNConfig | None = None,
    tree_config: TreeConfig | None = None,
) -> SelectionResult:
    """Fit every kind in ``kinds`` once per seed on the training split; select by mean validation PRR.

    Labels: 1 = correct (no retrieval needed). ``mlp_config`` / ``knn_config`` / ``tree_config`` default to their
    classes' defaults; the MLP's early stopping uses the validation split (the k-NN is deterministic, so its seeds
    repeat one model; the tree's seed breaks ties between equally good splits). Ties in mean PRR (exact) go to
    ``"logistic"``, then to the order of ``kinds``; within the chosen kind the run with the highest PRR wins (ties →
    the earlier seed). ConfigError on an unknown or repeated kind or an empty ``seeds``; DataError on bad data
    (one-class labels on either split included).
    """
    kinds = tuple(kinds)
    seeds = tuple(int(s) for s in seeds)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds or len(set(kinds)) != len(kinds):
        raise ConfigError(f"must be distinct names among {list(KINDS)}, got {list(kinds)}", "classify.kinds")
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"must be a non-empty list of distinct seeds, got {list(seeds)}", "classify.seeds")
    xt = as_features(X_train, where="X_train")
    yt = as_labels(y_train, xt.shape[0], where="y_train")
    xv = as_features(X_val, n_features=xt.shape[1], where="X_val")
    yv = as_labels(y_val, xv.shape[0], where="y_val")
    names = resolve_feature_names(feature_names, xt.shape[1])
    config = mlp_config or MLPConfig()
    settings = {"mlp_config": config, "feature_names": names, "logistic_C": logistic_C}
    settings |= {"knn_config": knn_config, "tree_config": tree_config}  # each kind reads its own

    runs: list[RunScore] = []
    models: dict[tuple[str, int], Classifier] = {}
    for kind in kinds:
        for seed in seeds:
            model = fit_one(kind, xt, yt, xv, yv, seed=seed, **settings)
            prr_value, auroc_value = _score(model.predict_proba(xv), yv)
            runs.append(RunScore(kind, seed, prr_value, auroc_value))
            models[kind, seed] = model

    summary: dict[str, KindSummary] = {}
    for kind in kinds:
        prrs = np.array([r.prr for r in runs if r.kind == kind])
        aurocs = np.array([r.auroc for r in runs if r.kind == kind])
        summary[kind] = KindSummary(
            kind, float(prrs.mean()), float(prrs.std()), float(aurocs.mean()), float(aurocs.std())
        )

    preference = sorted(kinds, key=lambda k: (k != "logistic", kinds.index(k)))
    chosen = max(preference, key=lambda k: _key(summary[k].mean_prr))  # max keeps the first of equal keys
    best = max((r for r in runs if r.kind == chosen), key=lambda r: _key(r.prr))
    return SelectionResult(chosen, best.seed, models[chosen, best.seed], tuple(runs), summary)
