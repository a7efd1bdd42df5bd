"""Graph-spectral consistency features: the five Lin et al. (2023) methods and the Directional Entailment Graph.

D²-RAG spec §3.3 items 9–13 (paper eqs. 29–34) and 17 (eqs. 26–27). All read the one shared NLI matrix
(``nli_probs``, question-prefixed, temperature 1) and pick their answer set from it: the first 5 samples, or the
first 4 samples plus the greedy answer (greedy last). Each builds its own W from that sub-matrix (the spec's [REC]
cache: no extra NLI calls).

NLI temperature: TTLM computes P = softmax(logits / 3.0) for the Lin et al. methods. The stat holds temperature-1
probabilities, so the features re-derive the tempered distribution exactly as softmax(log p / 3.0)
(:func:`~workbench.uncertainty.graph_math.temper_probs`); ``temperature`` is a parameter (1.0 = no tempering).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.uncertainty.features.base import Feature, has_nan, nli_answer_set
from workbench.uncertainty.graph_math import (
    ENTAILMENT,
    degree_confidence,
    degree_uncertainty,
    eccentricities,
    eccentricity_uncertainty,
    jaccard_matrix,
    lin_affinity,
    random_walk_eigen_uncertainty,
    sum_eigen_uncertainty,
)

_NLI_STATS = ("nli_probs", "nli_index_samples")
_NLI_STATS_GREEDY = ("nli_probs", "nli_index_samples", "nli_index_greedy")


@dataclass(frozen=True)
class _LinFeature(Feature):
    """Shared parameters: answer-set size and NLI temperature (3.0)."""

    n_samples: int = 5
    temperature: float = 3.0

    with_greedy = False

    def _affinity(self, stats: Mapping[str, Any]) -> np.ndarray | None:
        """W over this feature's answer set, or None (→ NaN) when the set is empty or the NLI holds NaN."""
        probs, idx = nli_answer_set(self, stats, self.n_samples, self.with_greedy)
        return lin_affinity(probs, self.temperature) if idx.size and not has_nan(probs) else None


@dataclass(frozen=True)
class SumEigenUncertainty(_LinFeature):
    """U_EigV = Σ_k max(0, 1 − λ_k(L)), L = I − D^{−1/2} W D^{−1/2} on samples 1–5 (eq. 30; TTLM).

    ≈ 1 when the answers agree, up to m when all differ. ↑ = uncertain, orientation −1. NaN without samples.
    """

    name = "sum_eigen_uncertainty"
    category = "consistency"
    orientation = -1
    stats = _NLI_STATS

    def raw(self, stats: Mapping[str, Any]) -> float:
        w = self._affinity(stats)
        return float("nan") if w is None else sum_eigen_uncertainty(w)


@dataclass(frozen=True)
class MatrixDegreeUncertainty(_LinFeature):
    """U_Deg = trace(m·I − D) / m² on samples 1–5 (eq. 31; TTLM). ↑ = uncertain, orientation −1. NaN without samples."""

    name = "matrix_degree_uncertainty"
    category = "consistency"
    orientation = -1
    stats = _NLI_STATS

    def raw(self, stats: Mapping[str, Any]) -> float:
        w = self._affinity(stats)
        return float("nan") if w is None else degree_uncertainty(w)


@dataclass(frozen=True)
class MatrixDegreeConfidence(_LinFeature):
    """C_Deg = D_jj / m for the greedy answer j over samples 1–4 + greedy (eq. 32; TTLM). ↑ = certain, orientation +1.

    With no sample the set is the greedy answer alone (C_Deg = 1).
    """

    n_samples: int = 4

    name = "matrix_degree_confidence"
    category = "consistency"
    orientation = 1
    stats = _NLI_STATS_GREEDY
    with_greedy = True

    def raw(self, stats: Mapping[str, Any]) -> float:
        w = self._affinity(stats)
        return float("nan") if w is None else degree_confidence(w, len(w) - 1)


@dataclass(frozen=True)
class EccentricityUncertainty(_LinFeature):
    """U_Ecc on samples 1–5 (eq. 33): spectral embedding from the eigenvectors of L with λ < 0.9, rows centred.

    ``stacked=False`` (TTLM, default): Σ_j ‖v′_j‖₂; ``stacked=True`` (Lin et al. / eq. 33): ‖[v′_1; …; v′_m]‖₂.
    0 when all answers agree; grows with the spread of the clusters. ↑ = uncertain, orientation −1.
    """

    eigen_threshold: float = 0.9
    stacked: bool = False

    name = "eccentricity_uncertainty"
    category = "consistency"
    orientation = -1
    stats = _NLI_STATS

    def raw(self, stats: Mapping[str, Any]) -> float:
        w = self._affinity(stats)
        return float("nan") if w is None else eccentricity_uncertainty(w, self.eigen_threshold, self.stacked)


@dataclass(frozen=True)
class EccentricityConfidence(_LinFeature):
    """‖v′_j‖₂ of the greedy answer j in the spectral embedding of samples 1–4 + greedy (eq. 34; TTLM).

    Raw = the greedy answer's distance from the centre (↑ = uncertain); TTLM's truth value is −‖v′_j‖₂, so
    orientation −1.
    """

    n_samples: int = 4
    eigen_threshold: float = 0.9

    name = "eccentricity_confidence"
    category = "consistency"
    orientation = -1
    stats = _NLI_STATS_GREEDY
    with_greedy = True

    def raw(self, stats: Mapping[str, Any]) -> float:
        w = self._affinity(stats)
        return float("nan") if w is None else float(eccentricities(w, self.eigen_threshold)[-1])


@dataclass(frozen=True)
class DirectionalEntailmentGraph(Feature):
    """Directional entailment graph uncertainty on samples 1–5 (eqs. 26–27; Da et al. 2024; TTLM, Jaccard mode).

    A_ij = P_entail(s_i → s_j) (A_ii = 1); T_ij = Jaccard of lower-cased, punctuation-stripped word sets (T_ii = 1);
    W = A + T; L_rw = I − diag(1/(rowsum(W) + 1e-6)) W; U = Σ_k max(0, 1 − |Re λ_k(L_rw)|). ≈ 1 when all agree, → m
    when all differ. ↑ = uncertain, orientation −1. NaN without samples.

    Departures from TTLM (docs/features.md): TTLM runs DEG's NLI on the raw answers without the question; here it
    reads the shared question-prefixed matrix (no extra NLI calls), so two samples with the same text have entailment
    1 (the matrix's diagonal, no judge call; TTLM judges every pair i ≠ j). Words are split on white space after
    removing ASCII punctuation (TTLM removes every non-word character, non-ASCII punctuation included, and keeps
    "_"); two empty word sets, and an empty one with itself, have Jaccard 1 (TTLM: 0).
    """

    n_samples: int = 5
    eps: float = 1e-6

    name = "directional_entailment_graph"
    category = "consistency"
    orientation = -1
    stats = ("nli_probs", "nli_index_samples", "nli_texts")

    def raw(self, stats: Mapping[str, Any]) -> float:
        probs, idx = nli_answer_set(self, stats, self.n_samples, with_greedy=False)
        texts = list(self._stat(stats, "nli_texts"))
        n_unique = np.asarray(self._stat(stats, "nli_probs")).shape[0]
        if len(texts) != n_unique:
            raise self._bad(f"{len(texts)} nli_texts for an NLI matrix over {n_unique} texts")
        if idx.size == 0 or has_nan(probs):
            return float("nan")
        entail = probs[..., ENTAILMENT].copy()
        np.fill_diagonal(entail, 1.0)
        w = entail + jaccard_matrix([texts[i] for i in idx])
        return random_walk_eigen_uncertainty(w, self.eps)
