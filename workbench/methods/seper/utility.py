"""Retrieval utility for D²-RAG Stage 2: the gold-free estimators used at runtime, and the oracle used in evaluation.

The paper's utility δ is ΔSePer = SePer(q | C) − SePer(q) (spec §7.1, :mod:`workbench.uncertainty.seper`): the
model's belief mass on the **gold** answer with minus without the retrieved context. It needs the gold answer, so it
is a *label*, never a runtime signal (spec §13.1). The utilities share one small interface,
``estimate(tools, examples, contexts, scores, closed=None) -> UtilityEstimate``:

* :class:`~workbench.methods.seper.utility_classifier.UtilityClassifier` (``requires_gold = False``, kind
  ``logistic_utility``; what ``fit_utility`` trains by default) — the runtime substitute of spec §13.1 [REC]
  ``utility_learned``: a multinomial logistic regression from the gold-free features below to the three utility
  classes (ΔSePer cut at τ_pos / τ_neg). Its estimate carries the predicted ``classes``, which D²-RAG decodes with
  directly.
* :class:`UtilityPredictor` (``requires_gold = False``, kind ``ridge_utility``; ``fit_utility.model: ridge`` and
  older runs and bundles) — a ridge regression (numpy closed form on standardised inputs) from the same features to
  ΔSePer. Its output is on the ΔSePer scale and D²-RAG cuts it at τ_pos / τ_neg. Shrinkage towards the mean makes it
  rarely, if ever, cross τ_neg: it does not predict "noisy" (issue 17), which is why the classifier replaced it.
* :class:`OracleUtility` (``requires_gold = True``) — reads the example's stored ΔSePer (paper-faithful replication
  and upper bound; evaluation only, a bundle refuses it).
* :class:`NoUtility` — δ unknown: every retrieved context decoded neutrally (a bundle without ``fit_utility``).

The features (:data:`UTILITY_FEATURES`, one row per pair; :func:`utility_features`):

==========================  ======================================================================================
``score_max``/``score_mean``  the retrieval scores of the context's passages (NaN with no scores)
``nll_closed``                mean token NLL of the greedy closed-book answer (its EOS NLL when the answer is empty)
``nll_context``               the same for the greedy answer with the context (the answering prompt of every method)
``nll_delta``                 ``nll_context − nll_closed`` (negative: the context made the model surer)
``answers_em``/``answers_f1`` normalised exact match / token F1 between the two answers (do they agree?)
``entail_context``            P(entailment) of the NLI judge, premise = the context, hypothesis = question + the
                              with-context answer (is the answer grounded in the context?); with the rule-based
                              ``answer_equivalence`` judge the hypothesis is the answer alone, so the column says
                              whether the answer occurs in the context as whole words
``entail_closed``             the same with the closed-book answer (does the context support what the model knew?)
==========================  ======================================================================================

Cost per batch: one greedy ``generate`` call per condition (closed-book — skipped when the caller passes the
closed-book answers it already has — and with context), one ``judge.entail`` call holding both hypotheses of every
pair. Without a judge the entailment columns are NaN, which the learned utilities impute with their training means.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.calibration.standardize import fit_standardizer
from workbench.core.errors import DataError
from workbench.data.nli_labels import ENTAILMENT
from workbench.methods.base import Tools
from workbench.methods.common import generate_answers
from workbench.metrics.qa import exact_match, token_f1
from workbench.uncertainty.seper import delta_seper

UTILITY_FEATURES: tuple[str, ...] = (
    "score_max",
    "score_mean",
    "nll_closed",
    "nll_context",
    "nll_delta",
    "answers_em",
    "answers_f1",
    "entail_context",
    "entail_closed",
)
"""Column order of :func:`utility_features`."""

UTILITY_CLASSES: tuple[str, ...] = ("noisy", "neutral", "relevant")
"""D²-RAG's three utility classes (spec §7.2), in the order of every per-class array (probabilities, biases)."""

FORMAT_VERSION = 1


@dataclass
class ClosedAnswer:
    """A closed-book answer the caller already has: its text and mean token NLL."""

    text: str
    nll: float


@dataclass
class UtilityInputs:
    """What :func:`utility_inputs` computed: the feature matrix, both answers, and the with-context generations."""

    X: np.ndarray
    closed_texts: list[str]
    context_texts: list[str]
    context_generations: list[Any]


@dataclass
class UtilityEstimate:
    """Utility per (question, context) pair and how it was obtained.

    ``values`` δ on the ΔSePer scale (NaN where unknown — and for a classifier, which predicts a class, not δ);
    ``source`` ``"learned"``, ``"oracle"`` or ``"none"``; ``features`` the estimator's inputs (None for the oracle);
    ``context_generations`` the greedy with-context answers the features needed (reusable as the neutral-mode
    answer), or None. ``classes`` (one of :data:`UTILITY_CLASSES` per pair, or None) is the decoding class when the
    estimator decides it itself: D²-RAG then uses it as is and cuts no δ (``values`` decide only when ``classes`` is
    None); ``probabilities`` ``(n, 3)`` the classifier's class probabilities in :data:`UTILITY_CLASSES` order.
    """

    values: np.ndarray
    source: str
    features: np.ndarray | None = None
    context_generations: list[Any] | None = None
    classes: list[str] | None = None
    probabilities: np.ndarray | None = None


def feature_matrix(X: Any, columns: int, where: str) -> np.ndarray:
    """``X`` as a float matrix of ``columns`` columns (NaN allowed: the learned utilities impute it); DataError on
    another shape or on ±inf."""
    arr = np.asarray(X, dtype=float)
    if arr.ndim != 2 or arr.shape[1] != columns:
        raise DataError(f"expected a 2-D array with {columns} columns, got {arr.shape}", where)
    if np.isinf(arr).any():
        raise DataError("features hold ±inf", where)
    return arr


def impute_and_standardise(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mean, scale, z)`` of a feature matrix: NaN cells filled with their column's mean (0 for an all-NaN column),
    then each column standardised (:func:`~workbench.calibration.standardize.fit_standardizer`: a constant column
    gets scale 1). ``mean`` doubles as the imputation value at prediction time."""

    with np.errstate(all="ignore"):
        column_means = np.nanmean(arr, axis=0)
    filled = np.where(np.isnan(arr), np.where(np.isfinite(column_means), column_means, 0.0), arr)
    mean, scale = fit_standardizer(filled)
    return mean, scale, (filled - mean) / scale


def answer_nll(logprobs: Sequence[float], eos_logprob: float | None = None) -> float:
    """Mean token NLL of an answer; for an empty answer the NLL of its EOS token (0.0 when that is unknown)."""
    lp = np.asarray(logprobs, dtype=float)
    if lp.size:
        return float(-lp.mean())
    return float(-eos_logprob) if eos_logprob is not None and math.isfinite(eos_logprob) else 0.0


def closed_from_stats(stats: dict[str, Any]) -> ClosedAnswer:
    """The closed-book answer of a stats row (``greedy_text``, ``greedy_logprobs`` with the EOS entry last when
    ``greedy_eos``) as a :class:`ClosedAnswer`."""
    lp = [float(v) for v in stats["greedy_logprobs"]]
    if stats.get("greedy_eos") and lp:
        return ClosedAnswer(str(stats["greedy_text"]), answer_nll(lp[:-1], lp[-1]))
    return ClosedAnswer(str(stats["greedy_text"]), answer_nll(lp))


def _generation_nll(gen: Any) -> float:
    return answer_nll(gen.logprobs, getattr(gen, "eos_logprob", None))


def utility_inputs(
    tools: Tools,
    questions: Sequence[str],
    contexts: Sequence[str],
    scores: Sequence[Sequence[float]],
    *,
    closed: Sequence[ClosedAnswer] | None = None,
) -> UtilityInputs:
    """Gold-free utility features of each (question, context) pair, batched (see the module docstring)."""

    questions, contexts, scores = list(questions), list(contexts), list(scores)
    n = len(questions)
    if len(contexts) != n or len(scores) != n:
        raise DataError(f"{n} questions, {len(contexts)} contexts and {len(scores)} score lists", "utility_features")
    if any(not isinstance(c, str) or not c for c in contexts):
        raise DataError("every pair needs a non-empty context string", "utility_features")
    if closed is not None and len(closed) != n:
        raise DataError(f"{n} questions but {len(closed)} closed-book answers", "utility_features")
    X = np.full((n, len(UTILITY_FEATURES)), np.nan)
    if n == 0:
        return UtilityInputs(X, [], [], [])
    if closed is None:
        closed = [
            ClosedAnswer(g.text.strip(), _generation_nll(g)) for g in generate_answers(tools, questions, [None] * n)
        ]
    with_ctx = generate_answers(tools, questions, contexts)
    closed_texts = [c.text.strip() for c in closed]
    ctx_texts = [g.text.strip() for g in with_ctx]
    for i in range(n):
        s = np.asarray(scores[i], dtype=float)
        s = s[np.isfinite(s)]
        nll_closed, nll_ctx = float(closed[i].nll), _generation_nll(with_ctx[i])
        X[i, 0:2] = (s.max(), s.mean()) if s.size else (np.nan, np.nan)
        X[i, 2:5] = (nll_closed, nll_ctx, nll_ctx - nll_closed)
        X[i, 5] = exact_match(ctx_texts[i], [closed_texts[i]])
        X[i, 6] = token_f1(ctx_texts[i], [closed_texts[i]])
    if tools.judge is not None:
        # a model judge reads "question answer" as a claim; the rule judge compares answers, so it gets the bare
        # answer and its whole-word containment test asks whether the context holds it
        bare = getattr(tools.judge, "kind", "") == "answer_equivalence"
        hypotheses = [a if bare else f"{q} {a}" for q, a in zip(questions, ctx_texts, strict=True)]
        hypotheses += [a if bare else f"{q} {a}" for q, a in zip(questions, closed_texts, strict=True)]
        probs = tools.judge.entail(contexts + contexts, hypotheses)
        X[:, 7] = probs[:n, ENTAILMENT]
        X[:, 8] = probs[n:, ENTAILMENT]
    return UtilityInputs(X, closed_texts, ctx_texts, list(with_ctx))


def utility_features(
    tools: Tools, questions: Sequence[str], contexts: Sequence[str], scores: Sequence[Sequence[float]]
) -> np.ndarray:
    """The ``(n, len(UTILITY_FEATURES))`` matrix for n (question, context, retrieval scores) triples.

    One greedy generate call per condition and one ``judge.entail`` call for the whole batch.
    """
    return utility_inputs(tools, questions, contexts, scores).X


# ---------------------------------------------------------------------------------------------- learned utilities
class LearnedUtility(ABC):
    """What the two learned, gold-free utilities share (:class:`UtilityPredictor`,
    :class:`~workbench.methods.seper.utility_classifier.UtilityClassifier`): rows of :data:`UTILITY_FEATURES` (or their
    ``feature_names``) in, fitted on ΔSePer labels; :meth:`estimate` computes the features of each pair
    (:func:`utility_inputs`, no gold field is read) and hands them to the subclass's :meth:`_from_features`."""

    kind: str
    requires_gold = False
    feature_names: tuple[str, ...]

    @property
    @abstractmethod
    def is_fitted(self) -> bool:
        """Whether :meth:`fit` (or :meth:`from_dict`) has set the parameters."""

    def _matrix(self, X: Any, where: str) -> np.ndarray:
        return feature_matrix(X, len(self.feature_names), where)

    def _fit_rows(self, X: Any, y: Any, where: str) -> tuple[np.ndarray, np.ndarray]:
        """``(features, ΔSePer labels)`` for :meth:`fit`: a feature matrix and one finite label per row, at least 2
        rows (DataError naming ``where`` otherwise)."""
        arr = self._matrix(X, where)
        target = np.asarray(y, dtype=float).reshape(-1)
        if target.size != arr.shape[0]:
            raise DataError(f"{arr.shape[0]} rows but {target.size} labels", where)
        if target.size < 2 or not np.isfinite(target).all():
            raise DataError("need at least 2 rows with finite labels", where)
        return arr, target

    def estimate(
        self,
        tools: Tools,
        examples: Sequence[dict[str, Any]],
        contexts: Sequence[str],
        scores: Sequence[Sequence[float]],
        closed: Sequence[ClosedAnswer] | None = None,
    ) -> UtilityEstimate:
        """Features of each pair (no gold field is read), then :meth:`_from_features`."""
        inputs = utility_inputs(tools, [str(ex["question"]) for ex in examples], contexts, scores, closed=closed)
        return self._from_features(inputs)

    @abstractmethod
    def _from_features(self, inputs: UtilityInputs) -> UtilityEstimate:
        """The estimate of the pairs whose features and with-context answers are ``inputs``."""


# ---------------------------------------------------------------------------------------------- the predictor
class UtilityPredictor(LearnedUtility):
    """Ridge regression of ΔSePer on the gold-free utility features (numpy closed form, standardised inputs).

    ``fit(X, y)`` imputes NaN inputs with the column means, standardises each column (a constant column gets scale
    1), and solves ``(ZᵀZ + l2·I) w = Zᵀ(y − ȳ)`` with intercept ȳ. ``predict(X)`` imputes NaN with the training
    means and clips to [−1, 1] (the range of ΔSePer). JSON only: ``to_dict()`` / ``from_dict()``.

    Kept for ``fit_utility.model: ridge`` and for runs and bundles that hold a ``ridge_utility``; the default is
    :class:`~workbench.methods.seper.utility_classifier.UtilityClassifier` (spec §13.1 asks for a classifier of the
    classes: a regression onto ΔSePer shrinks towards the mean and, cut at τ_neg, hardly ever says "noisy").
    """

    kind = "ridge_utility"

    def __init__(self, l2: float = 1.0, feature_names: Sequence[str] = UTILITY_FEATURES) -> None:
        if not math.isfinite(l2) or l2 < 0:
            raise DataError(f"l2 must be a finite number >= 0, got {l2}", "UtilityPredictor")
        self.l2 = float(l2)
        self.feature_names = tuple(feature_names)
        self.mean_: np.ndarray | None = None
        self.scale_: np.ndarray | None = None
        self.coef_: np.ndarray | None = None
        self.intercept_: float = 0.0
        self.n_train_: int = 0

    @property
    def is_fitted(self) -> bool:
        """Whether :meth:`fit` (or :meth:`from_dict`) has set the parameters."""
        return self.coef_ is not None

    def fit(self, X: Any, y: Any) -> UtilityPredictor:
        """Fit on feature rows ``X`` and ΔSePer labels ``y`` (finite, one per row, at least 2 rows); returns self."""
        arr, target = self._fit_rows(X, y, "UtilityPredictor.fit")
        mean, scale, z = impute_and_standardise(arr)
        intercept = float(target.mean())
        gram = z.T @ z + self.l2 * np.eye(z.shape[1])
        coef = np.linalg.lstsq(gram, z.T @ (target - intercept), rcond=None)[0]
        self.mean_, self.scale_, self.coef_, self.intercept_ = mean, scale, coef, intercept
        self.n_train_ = int(target.size)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Predicted ΔSePer per row, clipped to [−1, 1]; NaN inputs are imputed with the training means."""
        if self.coef_ is None or self.mean_ is None or self.scale_ is None:
            raise RuntimeError("UtilityPredictor is not fitted: call fit() or from_dict()")
        arr = self._matrix(X, "UtilityPredictor.predict")
        filled = np.where(np.isnan(arr), self.mean_, arr)
        return np.clip(((filled - self.mean_) / self.scale_) @ self.coef_ + self.intercept_, -1.0, 1.0)

    def _from_features(self, inputs: UtilityInputs) -> UtilityEstimate:
        """:meth:`predict` of the features: δ on the ΔSePer scale, cut by D²-RAG at τ_pos / τ_neg."""
        return UtilityEstimate(self.predict(inputs.X), "learned", inputs.X, inputs.context_generations)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` restores the predictor exactly."""
        if self.coef_ is None or self.mean_ is None or self.scale_ is None:
            raise RuntimeError("UtilityPredictor is not fitted: nothing to save")
        return {
            "kind": self.kind,
            "version": FORMAT_VERSION,
            "feature_names": list(self.feature_names),
            "l2": self.l2,
            "mean": [float(v) for v in self.mean_],
            "scale": [float(v) for v in self.scale_],
            "coef": [float(v) for v in self.coef_],
            "intercept": float(self.intercept_),
            "n_train": self.n_train_,
        }

    @classmethod
    def from_dict(cls, d: Any) -> UtilityPredictor:
        """Rebuild a fitted predictor from :meth:`to_dict` output; :class:`DataError` on a malformed dict."""
        keys = {"kind", "version", "feature_names", "l2", "mean", "scale", "coef", "intercept", "n_train"}
        if not isinstance(d, dict) or set(d) != keys:
            got = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise DataError(f"expected the keys {sorted(keys)}, got {got}", "utility predictor")
        if d["kind"] != cls.kind or d["version"] != FORMAT_VERSION:
            raise DataError(f"unsupported kind/version {d['kind']!r}/{d['version']!r}", "utility predictor")
        names = [str(n) for n in d["feature_names"]]
        vectors = {}
        for key in ("mean", "scale", "coef"):
            vec = np.asarray(d[key], dtype=float)
            if vec.shape != (len(names),) or not np.isfinite(vec).all():
                raise DataError(f"{key} must hold {len(names)} finite numbers", "utility predictor")
            vectors[key] = vec
        if not math.isfinite(float(d["intercept"])) or (vectors["scale"] <= 0).any():
            raise DataError("intercept must be finite and scales positive", "utility predictor")
        out = cls(float(d["l2"]), names)
        out.mean_, out.scale_, out.coef_ = vectors["mean"], vectors["scale"], vectors["coef"]
        out.intercept_, out.n_train_ = float(d["intercept"]), int(d["n_train"])
        return out


# ---------------------------------------------------------------------------------------------- no utility
class NoUtility:
    """The gold-free default when no utility predictor was fitted: δ is unknown (NaN) for every pair, so D²-RAG
    decodes every retrieved context neutrally — plain greedy with the context (spec §7.2's rule for an unknown δ).

    No model call is made; a bundle exported without a ``fit_utility`` stage runs D²-RAG this way and says so.
    """

    requires_gold = False

    def estimate(
        self,
        tools: Tools,
        examples: Sequence[dict[str, Any]],
        contexts: Sequence[str],
        scores: Sequence[Sequence[float]],
        closed: Sequence[ClosedAnswer] | None = None,
    ) -> UtilityEstimate:
        """NaN for every pair (no gold field is read, nothing is generated)."""
        return UtilityEstimate(np.full(len(examples), np.nan), "none")


# ---------------------------------------------------------------------------------------------- the oracle
class OracleUtility:
    """The paper's utility: ΔSePer of the (question, context) pair, which needs the gold answer (evaluation only).

    An example that carries a stored value (the first of ``keys`` present: default ``delta_seper``, then the
    collected ``delta_seper_s``) uses it. Otherwise, with ``compute=True`` and gold ``answers`` in the example, ΔSePer
    is computed on the spot from the actual context (:func:`workbench.uncertainty.seper.delta_seper` with
    ``settings``; ``label`` picks the SePer-S or SePer-H variant): one sampling call and one NLI call for the
    batch. Anything else gives NaN, which D²-RAG decodes as neutral (spec §7.2).
    """

    requires_gold = True

    def __init__(
        self,
        keys: Sequence[str] = ("delta_seper", "delta_seper_s"),
        *,
        compute: bool = True,
        settings: Any = None,
        label: str = "delta_seper_s",
    ) -> None:
        if label not in ("delta_seper_s", "delta_seper_h"):
            raise DataError(f"label must be delta_seper_s or delta_seper_h, got {label!r}", "OracleUtility")
        self.keys = tuple(keys)
        self.compute = compute
        self.settings = settings
        self.label = label

    def value(self, example: dict[str, Any]) -> float:
        """The stored ΔSePer of one example (NaN when absent or not a finite number)."""
        for key in self.keys:
            value = example.get(key)
            if value is not None:
                try:
                    number = float(value)
                except (TypeError, ValueError):
                    return float("nan")
                return number if math.isfinite(number) else float("nan")
        return float("nan")

    def estimate(
        self,
        tools: Tools,
        examples: Sequence[dict[str, Any]],
        contexts: Sequence[str],
        scores: Sequence[Sequence[float]],
        closed: Sequence[ClosedAnswer] | None = None,
    ) -> UtilityEstimate:
        """The stored values; the missing ones computed with the gold answers when ``compute`` (see the class)."""
        values = np.asarray([self.value(ex) for ex in examples], dtype=float)
        todo = [
            i
            for i, ex in enumerate(examples)
            if math.isnan(values[i]) and ex.get("answers") and contexts[i] and ex.get("question")
        ]
        if self.compute and todo and tools.judge is not None:
            labels = delta_seper(
                [{"question": str(examples[i]["question"]), "answers": list(examples[i]["answers"])} for i in todo],
                [contexts[i] for i in todo],
                generator=tools.generator,
                judge=tools.judge,
                settings=self.settings,
            )
            for i, label in zip(todo, labels, strict=True):
                values[i] = float(label[self.label])
        return UtilityEstimate(values, "oracle")
