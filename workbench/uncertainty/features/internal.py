"""Internal-state features: INSIDE / EigenScore and Attention Score (D²-RAG spec §3.3 items 7 and 8)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.uncertainty.features.base import LOGPROB_FLOOR, Feature


def eigen_score(hidden: np.ndarray, alpha: float = 1e-3) -> float:
    """EigenScore E = (1/K) Σ_i ln λ_i(Σ + α I_K), Σ = Z J_d Zᵀ, J_d = I_d − (1/d) 1 1ᵀ (INSIDE, paper eqs. 20–21).

    ``hidden`` is Z ∈ R^{K×d} (one embedding per row); J_d centres each embedding over its d features, so
    Σ = Z_c Z_cᵀ with Z_c = Z − rowmean(Z). Identical embeddings give one non-zero eigenvalue and E ≈ ((K−1)/K) ln α
    (very low); mutually orthogonal ones give K similar eigenvalues (high). NaN for K = 0 or NaN inputs.
    """
    z = np.asarray(hidden, dtype=float)
    if z.ndim != 2:
        raise ValueError(f"hidden states must be (K, d), got shape {z.shape}")
    if z.shape[0] == 0 or np.isnan(z).any():
        return float("nan")
    centred = z - z.mean(axis=1, keepdims=True)
    cov = centred @ centred.T
    lam = np.linalg.eigvalsh(cov + alpha * np.eye(len(cov)))
    return float(np.log(np.maximum(lam, alpha * 1e-6)).mean())


@dataclass(frozen=True)
class Inside(Feature):
    """INSIDE EigenScore over the samples' middle-layer hidden states (eqs. 20–21; Chen et al. 2024; TTLM).

    z_k = ``sample_hidden`` row k: layer ⌊n_hs/2⌋ of HF ``hidden_states`` at the last decoding step kept (its input
    is the sample's last token before EOS). K = min(``n_samples``, N) = the first 10 samples as in the paper, but the
    stats graph samples N = 5 by default (``collect.samples``; every other feature reads at most 5, and each extra
    sample is one more decoded sequence per question), so K = 5 unless N = 10 is collected. See
    :func:`eigen_score`; α = 1e-3, no feature clipping. ↑E = more diverse = uncertain, orientation −1. NaN without
    samples.
    """

    n_samples: int = 10
    alpha: float = 1e-3

    name = "inside"
    category = "internal"
    orientation = -1
    stats = ("sample_hidden",)

    def raw(self, stats: Mapping[str, Any]) -> float:
        hidden = np.asarray(self._stat(stats, "sample_hidden"), dtype=float)
        if hidden.ndim != 2:
            raise self._bad(f"sample_hidden must be (N, d), got shape {hidden.shape}")
        return eigen_score(hidden[: self.n_samples], self.alpha)


@dataclass(frozen=True)
class AttentionScore(Feature):
    """LLM-Check attention score (paper eqs. 22–23; Sriramanan et al. 2024; TTLM ``AttentionScore(layer_index=-1)``).

    Score = (1/H) Σ_h (1/m) Σ_j log A^h_jj over the last layer's heads and the m positions in
    ``attention_logdiag`` (log-diagonals floored at ln 1e-12). The stats graph passes the greedy answer's m = L
    tokens, each at its own position (a teacher-forced pass over prompt + answer); the paper and TTLM average over
    the whole prompt + answer sequence, whose prompt positions do not depend on the answer and outnumber it. Used
    unflipped, as TTLM does: orientation +1 — the spec notes (§3.1 note B) it is near-uninformative (AUROC ≈ 0.5)
    and possibly wrongly signed; the increasing isotonic calibrator then makes it near-constant. NaN when there is
    no position.

    Version 2: the answer tokens' own positions (version 1 read the diagonal one position early, at the query that
    predicts each token, and missed the last answer token).
    """

    version = "2"
    name = "attention_score"
    category = "internal"
    orientation = 1
    stats = ("attention_logdiag",)

    def raw(self, stats: Mapping[str, Any]) -> float:
        logdiag = np.asarray(self._stat(stats, "attention_logdiag"), dtype=float)
        if logdiag.ndim != 2:
            raise self._bad(f"attention_logdiag must be (H, m), got shape {logdiag.shape}")
        if logdiag.size == 0:
            return float("nan")
        floored = np.where(np.isnan(logdiag), logdiag, np.maximum(logdiag, LOGPROB_FLOOR))
        return float(floored.mean())
