"""D²-RAG's gold-free utility classifier: relevant / neutral / noisy from gold-free features (spec §13.1 [REC]).

Spec §13.1 recommends, in place of the gold-using ΔSePer at inference, a ``utility_learned`` estimator "trained where
gold exists": target "3 classes via the same τ's", model "LR or small GBM, thresholds from dev". This is that
estimator, on the open-answer features of :data:`~workbench.methods.seper.utility.UTILITY_FEATURES`:

* **Labels.** ΔSePer cut at τ_pos / τ_neg by :func:`utility_class`, the cut D²-RAG decodes a δ by (noisy iff
  δ < τ_neg, relevant iff δ > τ_pos, else neutral; defaults 0.12 / −0.10, spec §7.3 / §13.3).
* **Model.** A multinomial logistic regression on standardised inputs (NaN imputed with the training means), L2
  penalty ``l2`` on the standardised weights (scikit-learn's ``C = 1 / l2``; ``l2 = 0``: none), **balanced class
  weights** (each class weighs ``n / (3 · n_class)``), so a minority class — "noisy" — is predicted at all; an
  unweighted fit, like the ridge regression before it, predicts the commonest class almost always. scikit-learn is
  used in :meth:`UtilityClassifier.fit` only; prediction is numpy and the parameters are plain JSON, so the runtime
  never imports it.
* **Decision rule and its thresholds (set on dev).** The class is ``argmax_c (log P(c | x) + b_c)``; the per-class
  biases ``b`` (a prior shift; b_neutral = 0) are the thresholds of this rule. ``fit`` holds out a stratified
  ``dev_fraction`` of its rows, fits the weights on the rest, and picks ``b_noisy``, ``b_relevant`` from
  :data:`BIAS_GRID` maximising the macro-F1 of the three classes on the held-out rows (ties: the smallest
  ``|b_noisy| + |b_relevant|``, so no shift when it does not help). The weights are then refitted on every row and
  the biases kept. The biases are never chosen on rows they are scored on: ``fit_utility``'s out-of-fold figures fit
  one classifier (dev split included) per fold on the other folds. ``dev_fraction = 0`` skips the shift (b = 0: the
  balanced model's own argmax).

D²-RAG reads the class from the estimate (:attr:`~workbench.methods.seper.utility.UtilityEstimate.classes`) and decodes
with it directly; D²-RAG's own τ_pos / τ_neg do not enter (they were used once, to make the training labels, and are
stored in the file). ``values`` is NaN: the classifier does not estimate δ.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.core.errors import DataError
from workbench.methods.seper.utility import (
    UTILITY_CLASSES,
    UTILITY_FEATURES,
    LearnedUtility,
    UtilityEstimate,
    UtilityInputs,
    impute_and_standardise,
)

FORMAT_VERSION = 1
BIAS_GRID: tuple[float, ...] = (-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0)
"""Candidate per-class log-odds shifts for noisy and relevant (neutral is the reference, 0)."""

_KEYS = frozenset(
    {
        "kind",
        "version",
        "feature_names",
        "l2",
        "tau_pos",
        "tau_neg",
        "dev_fraction",
        "seed",
        "mean",
        "scale",
        "classes",
        "coef",
        "intercept",
        "bias",
        "n_train",
        "dev_rows",
        "label_counts",
    }
)


def utility_class(delta: float, tau_pos: float, tau_neg: float) -> str:
    """The utility class of a utility δ (ΔSePer or a prediction of it), the cut D²-RAG decodes by (spec §7.2):
    ``"noisy"`` if δ < τ_neg (checked first, as in the code), ``"relevant"`` if δ > τ_pos, else ``"neutral"`` (also
    for NaN)."""
    if math.isnan(delta):
        return "neutral"
    if delta < tau_neg:
        return "noisy"
    if delta > tau_pos:
        return "relevant"
    return "neutral"


def class_labels(delta: Sequence[float] | np.ndarray, tau_pos: float, tau_neg: float) -> np.ndarray:
    """The utility class of each ΔSePer value (:func:`utility_class`: an array of class names)."""
    return np.asarray([utility_class(float(v), tau_pos, tau_neg) for v in np.asarray(delta, dtype=float)], dtype=str)


def macro_f1(truth: Sequence[str], guess: Sequence[str]) -> float:
    """Mean F1 over the classes that occur among the labels or the predictions (F1 = 2·TP / (2·TP + FP + FN)); NaN
    for no rows. A class nobody has and nobody predicts does not count (scikit-learn's convention)."""
    truth, guess = list(truth), list(guess)
    if len(truth) != len(guess):
        raise DataError(f"{len(truth)} labels but {len(guess)} predictions", "macro_f1")
    seen = [c for c in UTILITY_CLASSES if c in truth or c in guess]
    if not seen:
        return float("nan")
    scores = []
    for c in seen:
        tp = sum(t == c and g == c for t, g in zip(truth, guess, strict=True))
        fp = sum(t != c and g == c for t, g in zip(truth, guess, strict=True))
        fn = sum(t == c and g != c for t, g in zip(truth, guess, strict=True))
        scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores))


@dataclass
class SoftmaxModel:
    """A linear softmax over ``classes`` (a subset of :data:`UTILITY_CLASSES`, in that order) on standardised inputs:
    ``log P = log_softmax(((x − mean) / scale) · coefᵀ + intercept)``; NaN inputs take the training mean."""

    mean: np.ndarray
    scale: np.ndarray
    classes: tuple[str, ...]
    coef: np.ndarray
    intercept: np.ndarray

    def log_proba(self, arr: np.ndarray) -> np.ndarray:
        """``(n, len(classes))`` log-probabilities of the rows of ``arr`` (raw features)."""
        filled = np.where(np.isnan(arr), self.mean, arr)
        logits = ((filled - self.mean) / self.scale) @ self.coef.T + self.intercept
        shifted = logits - logits.max(axis=1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def fit_softmax(arr: np.ndarray, labels: np.ndarray, l2: float, seed: int) -> SoftmaxModel:
    """Balanced-class-weight L2 logistic regression of ``labels`` on ``arr`` (scikit-learn, lbfgs; multinomial for
    three classes). Two classes become the equivalent two-row softmax (±half the binary weights); one class a
    constant model that always predicts it."""
    mean, scale, z = impute_and_standardise(arr)
    present = tuple(c for c in UTILITY_CLASSES if c in set(labels.tolist()))
    if len(present) == 1:
        return SoftmaxModel(mean, scale, present, np.zeros((1, z.shape[1])), np.zeros(1))
    from sklearn.linear_model import LogisticRegression

    target = np.asarray([present.index(v) for v in labels.tolist()])
    clf = LogisticRegression(
        C=1.0 / l2 if l2 > 0 else np.inf, class_weight="balanced", max_iter=2000, random_state=seed
    )
    clf.fit(z, target)
    coef = np.asarray(clf.coef_, dtype=np.float64)
    intercept = np.asarray(clf.intercept_, dtype=np.float64)
    if len(present) == 2:  # σ(s) = softmax([−s/2, s/2])[1]
        coef, intercept = np.vstack([-coef[0] / 2, coef[0] / 2]), np.array([-intercept[0] / 2, intercept[0] / 2])
    return SoftmaxModel(mean, scale, present, coef.copy(), intercept.copy())


def decide(model: SoftmaxModel, arr: np.ndarray, bias: np.ndarray) -> list[str]:
    """``argmax_c (log P(c | x) + b_c)`` per row over the model's classes (``bias`` in :data:`UTILITY_CLASSES`
    order); ties go to the earlier class of :data:`UTILITY_CLASSES`."""
    shift = np.asarray([bias[UTILITY_CLASSES.index(c)] for c in model.classes])
    best = np.argmax(model.log_proba(arr) + shift, axis=1)
    return [model.classes[i] for i in best]


def choose_bias(model: SoftmaxModel, arr: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The per-class biases (:data:`UTILITY_CLASSES` order, neutral 0) from :data:`BIAS_GRID` with the best macro-F1
    of :func:`decide` on the held-out rows ``arr`` / ``labels``; ties: the smallest total shift."""
    best_key, best = None, np.zeros(len(UTILITY_CLASSES))
    truth = labels.tolist()
    for b_noisy, b_relevant in itertools.product(BIAS_GRID, BIAS_GRID):
        bias = np.array([b_noisy, 0.0, b_relevant])
        key = (macro_f1(truth, decide(model, arr, bias)), -(abs(b_noisy) + abs(b_relevant)))
        if best_key is None or key > best_key:
            best_key, best = key, bias
    return best


class UtilityClassifier(LearnedUtility):
    """Three-class gold-free utility classifier for D²-RAG (see the module docstring; spec §13.1 [REC]).

    ``fit(X, y)`` takes the utility feature rows and their **ΔSePer** labels (cut into classes at ``tau_pos`` /
    ``tau_neg``); ``predict_proba(X)`` gives ``(n, 3)`` probabilities in :data:`UTILITY_CLASSES` order (0 for a
    class absent from training); ``predict(X)`` the decided classes (bias-shifted argmax); ``estimate(...)`` the
    :class:`~workbench.methods.seper.utility.UtilityEstimate` D²-RAG decodes with (``classes`` set, ``values``
    NaN). JSON only: ``to_dict()`` / ``from_dict()``; the same parameters always give the same bytes.
    """

    kind = "logistic_utility"

    def __init__(
        self,
        l2: float = 1.0,
        *,
        tau_pos: float = 0.12,
        tau_neg: float = -0.10,
        dev_fraction: float = 0.25,
        seed: int = 0,
        feature_names: Sequence[str] = UTILITY_FEATURES,
    ) -> None:
        where = "UtilityClassifier"
        if not math.isfinite(l2) or l2 < 0:
            raise DataError(f"l2 must be a finite number >= 0, got {l2}", where)
        if not (math.isfinite(tau_pos) and math.isfinite(tau_neg) and -1.0 <= tau_neg < tau_pos <= 1.0):
            raise DataError(f"need -1 <= tau_neg < tau_pos <= 1, got {tau_neg} / {tau_pos}", where)
        if not 0.0 <= dev_fraction < 1.0:
            raise DataError(f"dev_fraction must be in [0, 1), got {dev_fraction}", where)
        self.l2, self.tau_pos, self.tau_neg = float(l2), float(tau_pos), float(tau_neg)
        self.dev_fraction, self.seed = float(dev_fraction), int(seed)
        self.feature_names = tuple(feature_names)
        self.model_: SoftmaxModel | None = None
        self.bias_ = np.zeros(len(UTILITY_CLASSES))
        self.n_train_ = 0
        self.dev_rows_ = 0
        self.label_counts_: dict[str, int] = dict.fromkeys(UTILITY_CLASSES, 0)

    @property
    def is_fitted(self) -> bool:
        """Whether :meth:`fit` (or :meth:`from_dict`) has set the parameters."""
        return self.model_ is not None

    def _dev_mask(self, labels: np.ndarray) -> np.ndarray | None:
        """Stratified held-out rows for the biases (None: no shift — ``dev_fraction`` 0, or too few rows)."""
        if self.dev_fraction == 0:
            return None
        rng = np.random.default_rng(self.seed)
        dev = np.zeros(labels.size, dtype=bool)
        for c in UTILITY_CLASSES:
            rows = np.flatnonzero(labels == c)
            take = min(math.floor(self.dev_fraction * rows.size + 0.5), rows.size - 1)
            if take > 0:
                dev[rng.permutation(rows)[:take]] = True
        if not dev.any() or len(set(labels[~dev].tolist())) < 2:
            return None
        return dev

    def fit(self, X: Any, y: Any) -> UtilityClassifier:
        """Fit on feature rows ``X`` and their ΔSePer labels ``y`` (finite, one per row, at least 2 rows): biases on
        a held-out part, weights on every row (module docstring). Returns self."""
        arr, delta = self._fit_rows(X, y, "UtilityClassifier.fit")
        labels = class_labels(delta, self.tau_pos, self.tau_neg)
        dev = self._dev_mask(labels)
        bias = np.zeros(len(UTILITY_CLASSES))
        if dev is not None:
            part = fit_softmax(arr[~dev], labels[~dev], self.l2, self.seed)
            bias = choose_bias(part, arr[dev], labels[dev])
        self.model_ = fit_softmax(arr, labels, self.l2, self.seed)
        self.bias_ = bias
        self.n_train_ = int(delta.size)
        self.dev_rows_ = int(dev.sum()) if dev is not None else 0
        self.label_counts_ = {c: int((labels == c).sum()) for c in UTILITY_CLASSES}
        return self

    def _model(self) -> SoftmaxModel:
        if self.model_ is None:
            raise RuntimeError("UtilityClassifier is not fitted: call fit() or from_dict()")
        return self.model_

    def predict_proba(self, X: Any) -> np.ndarray:
        """``(n, 3)`` class probabilities in :data:`UTILITY_CLASSES` order (no bias; 0 for a class never seen)."""
        model = self._model()
        arr = self._matrix(X, "UtilityClassifier.predict_proba")
        out = np.zeros((arr.shape[0], len(UTILITY_CLASSES)))
        out[:, [UTILITY_CLASSES.index(c) for c in model.classes]] = np.exp(model.log_proba(arr))
        return out

    def predict(self, X: Any) -> list[str]:
        """The decided class of each row: ``argmax_c (log P(c | x) + b_c)`` with the dev-set biases."""
        return decide(self._model(), self._matrix(X, "UtilityClassifier.predict"), self.bias_)

    def weights(self) -> dict[str, dict[str, float]]:
        """Standardised weights per class the model knows: ``{class: {feature: w, "(intercept)": b}}``."""
        model = self._model()
        out = {}
        for row, c in enumerate(model.classes):
            out[c] = {n: float(w) for n, w in zip(self.feature_names, model.coef[row], strict=True)}
            out[c]["(intercept)"] = float(model.intercept[row])
        return out

    def _from_features(self, inputs: UtilityInputs) -> UtilityEstimate:
        """The decided classes of the features (``classes``), their probabilities, and NaN ``values`` (no δ is
        estimated)."""
        return UtilityEstimate(
            np.full(inputs.X.shape[0], np.nan),
            "learned",
            inputs.X,
            inputs.context_generations,
            classes=self.predict(inputs.X),
            probabilities=self.predict_proba(inputs.X),
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` restores the classifier exactly."""
        model = self._model()
        return {
            "kind": self.kind,
            "version": FORMAT_VERSION,
            "feature_names": list(self.feature_names),
            "l2": self.l2,
            "tau_pos": self.tau_pos,
            "tau_neg": self.tau_neg,
            "dev_fraction": self.dev_fraction,
            "seed": self.seed,
            "mean": [float(v) for v in model.mean],
            "scale": [float(v) for v in model.scale],
            "classes": list(model.classes),
            "coef": [[float(v) for v in row] for row in model.coef],
            "intercept": [float(v) for v in model.intercept],
            "bias": {c: float(b) for c, b in zip(UTILITY_CLASSES, self.bias_, strict=True)},
            "n_train": self.n_train_,
            "dev_rows": self.dev_rows_,
            "label_counts": dict(self.label_counts_),
        }

    @classmethod
    def from_dict(cls, d: Any) -> UtilityClassifier:
        """Rebuild a fitted classifier from :meth:`to_dict` output; :class:`DataError` on a malformed dict."""
        where = "utility classifier"
        if not isinstance(d, dict) or set(d) != _KEYS:
            got = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise DataError(f"expected the keys {sorted(_KEYS)}, got {got}", where)
        if d["kind"] != cls.kind or d["version"] != FORMAT_VERSION:
            raise DataError(f"unsupported kind/version {d['kind']!r}/{d['version']!r}", where)
        try:
            names = [str(n) for n in d["feature_names"]]
            classes = tuple(str(c) for c in d["classes"])
            mean, scale = (np.asarray(d[k], dtype=float) for k in ("mean", "scale"))
            coef, intercept = np.asarray(d["coef"], dtype=float), np.asarray(d["intercept"], dtype=float)
            bias = np.asarray([float(d["bias"][c]) for c in UTILITY_CLASSES])
            counts = {c: int(d["label_counts"][c]) for c in UTILITY_CLASSES}
            out = cls(
                float(d["l2"]),
                tau_pos=float(d["tau_pos"]),
                tau_neg=float(d["tau_neg"]),
                dev_fraction=float(d["dev_fraction"]),
                seed=int(d["seed"]),
                feature_names=names,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"malformed utility classifier ({exc!r})", where) from None
        if not classes or len(set(classes)) != len(classes) or any(c not in UTILITY_CLASSES for c in classes):
            raise DataError(f"classes must be distinct names among {list(UTILITY_CLASSES)}, got {classes}", where)
        if list(classes) != [c for c in UTILITY_CLASSES if c in classes]:
            raise DataError(f"classes must follow the order {list(UTILITY_CLASSES)}, got {list(classes)}", where)
        shapes = {"mean": (len(names),), "scale": (len(names),), "coef": (len(classes), len(names))}
        shapes["intercept"] = (len(classes),)
        arrays = {"mean": mean, "scale": scale, "coef": coef, "intercept": intercept}
        for key, shape in shapes.items():
            if arrays[key].shape != shape or not np.isfinite(arrays[key]).all():
                raise DataError(f"{key} must be {shape} finite numbers, got shape {arrays[key].shape}", where)
        if (scale <= 0).any() or not np.isfinite(bias).all():
            raise DataError("scales must be positive and biases finite", where)
        out.model_ = SoftmaxModel(mean, scale, classes, coef, intercept)
        out.bias_ = bias
        out.n_train_, out.dev_rows_, out.label_counts_ = int(d["n_train"]), int(d["dev_rows"]), counts
        return out
