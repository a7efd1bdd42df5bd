"""Probability-based features (D²-RAG spec §3.1 rows 0, 2–6; §3.3 items 0, 2–6) and the LARS-like scorer.

All log-probs are raw T=1 natural-log probabilities (:mod:`workbench.uncertainty.stats`). "Answer tokens" are the
greedy answer's tokens without EOS; Confidence alone keeps the EOS entry (TTLM).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.calibration.logistic_fit import fit_logistic_newton, sigmoid
from workbench.calibration.standardize import fit_standardizer
from workbench.core.errors import DataError
from workbench.data.stopwords import TOKEN_STOP_WORDS
from workbench.uncertainty.features.base import (
    Feature,
    answer_logprobs,
    as_logprobs,
    has_nan,
    length_normalised,
    sample_lns,
)

# --------------------------------------------------------------------------------------------------------------------
# Features
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entropy(Feature):
    """Predictive entropy from samples (paper eq. 10; TTLM ``Entropy(number_of_generations=5)``).

    H(x) ≈ −(1/B) Σ_{b=1..B} LNS(s_b) over the first ``n_samples`` (B = 5) samples, LNS = mean raw token log-prob.
    ↑H = uncertain, so orientation −1 (truth value = mean LNS). Samples with no scored token are skipped; NaN when
    none is left.
    """

    n_samples: int = 5

    name = "entropy"
    category = "probability"
    orientation = -1
    stats = ("sample_logprobs",)

    def raw(self, stats: Mapping[str, Any]) -> float:
        lns, _ = sample_lns(self._stat(stats, "sample_logprobs"), self.n_samples)
        return float(-lns.mean()) if lns.size else float("nan")


@dataclass(frozen=True)
class Mars(Feature):
    """Meaning-aware response score (paper eq. 11; Bakman et al. 2024; TTLM ``MARS(mars_temperature=0.1)``).

    MARS = ½ Σ_l w̃_l (−log p_l) + ½ (1/L) Σ_l (−log p_l) over the answer tokens (EOS dropped), with
    w̃ = softmax(importance / 0.1). ↑ = uncertain, orientation −1.

    Substitution: the weights are token-level (the paper's eq. 11 form); TTLM forms phrases with the MARS token
    classifier and softmaxes phrase importances. ``token_importance`` comes from a pluggable scorer; the offline
    substitute is :func:`heuristic_token_importance` (content tokens 1.0, stop words and punctuation 0.1). Uniform
    importance reduces MARS to the mean NLL (TTLM's fallback). NaN for an answer without tokens.
    """

    temperature: float = 0.1

    name = "mars"
    category = "probability"
    orientation = -1
    stats = ("greedy_logprobs", "greedy_eos", "token_importance")

    def raw(self, stats: Mapping[str, Any]) -> float:
        nll = -answer_logprobs(self._stat(stats, "greedy_logprobs"), bool(self._stat(stats, "greedy_eos")))
        importance = np.asarray(self._stat(stats, "token_importance"), dtype=float).reshape(-1)
        if importance.size != nll.size:
            raise self._bad(f"token_importance has {importance.size} entries for {nll.size} answer tokens")
        if nll.size == 0:
            return float("nan")
        scaled = importance / self.temperature
        weights = np.exp(scaled - scaled.max())
        weights /= weights.sum()
        return float(0.5 * (weights * nll).sum() + 0.5 * nll.mean())


@dataclass(frozen=True)
class Lars(Feature):
    """Learned answer confidence (paper eq. 12; Yaldiz et al. 2025; TTLM ``LARS(ue_type="confidence")``).

    Raw = σ(f) ∈ (0, 1), the scorer's confidence in the greedy answer; ↑ = certain, orientation +1.

    Substitution: the published LARS RoBERTa model is replaced by :class:`LarsLikeScorer`, a logistic regression over
    a fixed binning of the greedy token probabilities, trained by the workbench on collected data. The stat
    ``lars_score`` exists only once a scorer is fitted; before that this feature raises ``MissingStatError`` naming
    the missing scorer.
    """

    name = "lars"
    category = "probability"
    orientation = 1
    stats = ("lars_score",)

    def raw(self, stats: Mapping[str, Any]) -> float:
        return float(self._stat(stats, "lars_score"))


@dataclass(frozen=True)
class SentSar(Feature):
    """Sentence-level shifting attention to relevance (paper eqs. 15–16 corrected; Duan et al. 2024; TTLM).

    With p_k = exp(LNS(s_k)) and g = ``sts_samples`` (clipped to [0, 1]) over the first ``n_samples`` (K = 5):
    SentSAR = (1/K) Σ_k −log(p_k + (1/t) Σ_{j≠k} g(s_k, s_j) p_j), t = 0.001. ↑ = uncertain, orientation −1.

    Substitution: g is SAR's STS cross-encoder score; offline it is the cosine of MiniLM sentence embeddings clipped
    to [0, 1] (produced upstream). Empty samples are skipped; NaN when none is left.
    """

    n_samples: int = 5
    t: float = 0.001

    name = "sent_sar"
    category = "probability"
    orientation = -1
    stats = ("sample_logprobs", "sts_samples")

    def raw(self, stats: Mapping[str, Any]) -> float:
        lns, keep = sample_lns(self._stat(stats, "sample_logprobs"), self.n_samples)
        sim = np.asarray(self._stat(stats, "sts_samples"), dtype=float)
        if sim.ndim != 2 or sim.shape[0] != sim.shape[1]:
            raise self._bad(f"sts_samples must be square, got shape {sim.shape}")
        if keep.size and keep.max() >= sim.shape[0]:
            raise self._bad(f"sts_samples covers {sim.shape[0]} samples, need {keep.max() + 1}")
        g = sim[np.ix_(keep, keep)].copy()
        np.fill_diagonal(g, 0.0)  # the diagonal is ignored (j ≠ k)
        if lns.size == 0 or has_nan(g):
            return float("nan")
        p = np.exp(lns)
        g = np.clip(g, 0.0, 1.0)
        relevance = p + (g @ p) / self.t
        return float(-np.log(relevance).mean())


@dataclass(frozen=True)
class TokenSar(Feature):
    """Token-level shifting attention to relevance (paper eqs. 13–14; Duan et al. 2024; TTLM ``TokenSAR``).

    w_i = RT_i / Σ_n RT_n with RT_i = ``token_relevance`` (clipped ≥ 0) over the answer tokens (EOS dropped; TTLM
    keeps it, with its own RT); TokenSAR = Σ_i w_i (−log p_i). ↑ = uncertain, orientation −1. If every RT_i is 0
    the weights are uniform (mean NLL; TTLM: 0 / 0 = NaN). NaN for an answer without tokens.

    Substitution: RT_i = 1 − g(answer without token i, answer) with g = MiniLM embedding cosine instead of the STS
    cross-encoder (produced upstream).
    """

    name = "token_sar"
    category = "probability"
    orientation = -1
    stats = ("greedy_logprobs", "greedy_eos", "token_relevance")

    def raw(self, stats: Mapping[str, Any]) -> float:
        nll = -answer_logprobs(self._stat(stats, "greedy_logprobs"), bool(self._stat(stats, "greedy_eos")))
        rel = np.clip(np.asarray(self._stat(stats, "token_relevance"), dtype=float).reshape(-1), 0.0, None)
        if rel.size != nll.size:
            raise self._bad(f"token_relevance has {rel.size} entries for {nll.size} answer tokens")
        if nll.size == 0 or has_nan(rel):
            return float("nan")
        total = rel.sum()
        weights = rel / total if total > 0 else np.full(nll.size, 1.0 / nll.size)
        return float((weights * nll).sum())


@dataclass(frozen=True)
class Confidence(Feature):
    """Length-normalised sequence log-likelihood (paper eq. 9; Malinin & Gales 2021; TTLM ``Confidence``).

    C = (1/L) Σ_l log p_l over the greedy answer's tokens INCLUDING the EOS entry (TTLM). ↑ = certain, orientation
    +1. NaN when there is no token at all.
    """

    name = "confidence"
    category = "probability"
    orientation = 1
    stats = ("greedy_logprobs",)

    def raw(self, stats: Mapping[str, Any]) -> float:
        return length_normalised(self._stat(stats, "greedy_logprobs"))


# --------------------------------------------------------------------------------------------------------------------
# Offline substitutes for auxiliary models
# --------------------------------------------------------------------------------------------------------------------

STOP_WORDS: frozenset[str] = TOKEN_STOP_WORDS
"""English function words that get low importance in :func:`heuristic_token_importance`
(:data:`workbench.data.stopwords.TOKEN_STOP_WORDS`)."""

_SUBWORD_MARKERS = "Ġ▁Ċ#"


def heuristic_token_importance(tokens: Sequence[str], low: float = 0.1) -> np.ndarray:
    """Offline MARS importance: 1.0 for a content token, ``low`` for a stop-word or punctuation/whitespace token.

    ``tokens`` are the decoded answer tokens (EOS excluded). Subword markers (``Ġ``, ``▁``, ``Ċ``, ``##``) and
    surrounding whitespace are stripped and the rest lower-cased; a token is content when it holds a letter or digit
    and is not in :data:`STOP_WORDS`. This stands in for the MARS phrase classifier, which is unavailable offline.
    """
    out = np.empty(len(tokens), dtype=float)
    for i, tok in enumerate(tokens):
        core = tok.strip().lstrip(_SUBWORD_MARKERS).strip().lower()
        content = any(ch.isalnum() for ch in core) and core not in STOP_WORDS
        out[i] = 1.0 if content else low
    return out


DEFAULT_LARS_EDGES: tuple[float, ...] = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 1.0)
"""Probability bin edges of :class:`LarsLikeScorer` (LARS uses quantile bins of its own training data)."""


class LarsLikeScorer:
    """A small LARS-style confidence scorer: L2-regularised logistic regression on token-probability features.

    Features of an answer's log-probs (EOS excluded; p_l = exp(log p_l)):

    * the fraction of tokens whose probability falls in each bin of ``edges`` (len(edges) − 1 values; right-closed
      bins, the first also includes 0),
    * the mean and the minimum log-prob (0 for an empty answer),
    * ln(1 + L).

    Features are standardised with the training mean and standard deviation, and the model is fitted by damped
    Newton steps (:func:`~workbench.calibration.logistic_fit.fit_logistic_newton`) with penalty ``l2``·‖w‖²/2
    (intercept unpenalised). :meth:`predict` returns σ(w·x + b) ∈ (0, 1)
    — the ``lars_score`` stat. Serialises to a JSON-ready dict only (:meth:`to_dict` / :meth:`from_dict`), never pickle.
    """

    def __init__(self, edges: Sequence[float] = DEFAULT_LARS_EDGES, l2: float = 1.0, max_iter: int = 100) -> None:
        edges_arr = np.asarray(edges, dtype=float)
        if edges_arr.ndim != 1 or edges_arr.size < 2 or np.any(np.diff(edges_arr) <= 0):
            raise ValueError(f"edges must be a strictly increasing sequence of ≥ 2 values, got {list(edges)}")
        if l2 < 0:
            raise ValueError(f"l2 must be ≥ 0, got {l2}")
        self.edges = edges_arr
        self.l2 = float(l2)
        self.max_iter = int(max_iter)
        self.mean_: np.ndarray | None = None
        self.scale_: np.ndarray | None = None
        self.coef_: np.ndarray | None = None
        self.intercept_: float = 0.0
        self.n_train_: int = 0

    @property
    def fitted(self) -> bool:
        """True once :meth:`fit` has run (or the scorer was loaded from JSON)."""
        return self.coef_ is not None

    def featurize(self, logprobs: Sequence[float] | np.ndarray) -> np.ndarray:
        """The raw (unstandardised) feature vector of one answer's log-probs (see the class docstring)."""
        lp = as_logprobs(logprobs)
        n_bins = self.edges.size - 1
        if lp.size == 0:
            return np.zeros(n_bins + 3)
        probs = np.exp(lp)
        idx = np.clip(np.searchsorted(self.edges, probs, side="left") - 1, 0, n_bins - 1)
        hist = np.bincount(idx, minlength=n_bins)[:n_bins] / lp.size
        return np.concatenate([hist, [lp.mean(), lp.min(), math.log1p(lp.size)]])

    def _design(self, logprob_lists: Sequence[Sequence[float] | np.ndarray]) -> np.ndarray:
        return np.stack([self.featurize(lp) for lp in logprob_lists]) if len(logprob_lists) else np.zeros((0, 0))

    def fit(self, logprob_lists: Sequence[Sequence[float] | np.ndarray], labels: Sequence[int]) -> LarsLikeScorer:
        """Fit on answers' log-probs and their correctness labels (1 = correct, 0 = wrong); returns ``self``.

        Needs ≥ 2 examples with both labels present; raises :class:`~workbench.core.errors.DataError` otherwise.
        """
        y = np.asarray(labels, dtype=float).reshape(-1)
        if len(logprob_lists) != y.size:
            raise DataError(f"{len(logprob_lists)} answers but {y.size} labels", "LarsLikeScorer.fit")
        if not np.all((y == 0) | (y == 1)):
            raise DataError("labels must be 0 or 1", "LarsLikeScorer.fit")
        if y.size < 2 or y.min() == y.max():
            raise DataError("need at least one correct and one wrong answer", "LarsLikeScorer.fit")
        x = self._design(logprob_lists)
        self.mean_, self.scale_ = fit_standardizer(x)
        z = np.hstack([(x - self.mean_) / self.scale_, np.ones((y.size, 1))])
        penalty = np.full(z.shape[1], self.l2)
        penalty[-1] = 0.0  # the intercept is not shrunk
        beta = fit_logistic_newton(z, y, penalty, max_iter=self.max_iter)
        self.coef_ = beta[:-1]
        self.intercept_ = float(beta[-1])
        self.n_train_ = int(y.size)
        return self

    def predict_many(self, logprob_lists: Sequence[Sequence[float] | np.ndarray]) -> np.ndarray:
        """σ(w·x + b) for each answer; raises ``RuntimeError`` when the scorer is not fitted."""
        if self.coef_ is None or self.mean_ is None or self.scale_ is None:
            raise RuntimeError("LarsLikeScorer is not fitted: call fit() or load one with from_dict()")
        if not len(logprob_lists):
            return np.zeros(0)
        z = (self._design(logprob_lists) - self.mean_) / self.scale_
        return sigmoid(z @ self.coef_ + self.intercept_)

    def predict(self, logprobs: Sequence[float] | np.ndarray) -> float:
        """Confidence σ(w·x + b) ∈ (0, 1) that the answer with these log-probs is correct (the ``lars_score``)."""
        return float(self.predict_many([logprobs])[0])

    kind = "lars"
    version = 1

    def to_dict(self) -> dict[str, Any]:
        """The fitted scorer as a JSON-ready dict (edges, l2, standardisation, coefficients); no code, no pickle."""
        if self.coef_ is None or self.mean_ is None or self.scale_ is None:
            raise RuntimeError("LarsLikeScorer is not fitted: nothing to serialise")
        return {
            "kind": self.kind,
            "version": self.version,
            "edges": self.edges.tolist(),
            "l2": self.l2,
            "mean": self.mean_.tolist(),
            "scale": self.scale_.tolist(),
            "coef": self.coef_.tolist(),
            "intercept": self.intercept_,
            "n_train": self.n_train_,
        }

    @classmethod
    def from_dict(cls, obj: Any) -> LarsLikeScorer:
        """Rebuild a fitted scorer from :meth:`to_dict` output; DataError on a malformed dict."""
        where = "LARS scorer"
        keys = {"kind", "version", "edges", "l2", "mean", "scale", "coef", "intercept", "n_train"}
        if not isinstance(obj, Mapping) or obj.get("kind") != cls.kind or obj.get("version") != cls.version:
            raise DataError(f"not a LARS scorer of version {cls.version} (kind/version mismatch)", where)
        if set(obj) != keys:
            raise DataError(f"expected the keys {sorted(keys)}, got {sorted(obj)}", where)
        try:
            scorer = cls(edges=obj["edges"], l2=float(obj["l2"]))
            arrays = [np.asarray(obj[k], dtype=float) for k in ("mean", "scale", "coef")]
            intercept = float(obj["intercept"])
        except (TypeError, ValueError) as exc:
            raise DataError(f"malformed LARS scorer ({exc})", where) from None
        n_feat = scorer.edges.size - 1 + 3
        if any(a.shape != (n_feat,) for a in arrays):
            raise DataError(f"expected {n_feat} features in mean/scale/coef", where)
        if not all(np.isfinite(a).all() for a in arrays) or not math.isfinite(intercept) or (arrays[1] <= 0).any():
            raise DataError("non-finite parameters or non-positive scales", where)
        scorer.mean_, scorer.scale_, scorer.coef_ = arrays
        scorer.intercept_ = intercept
        scorer.n_train_ = int(obj["n_train"])
        return scorer
