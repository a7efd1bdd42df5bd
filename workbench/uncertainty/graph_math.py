"""Graph helpers for the consistency features: affinity matrices, degrees, Laplacians and their spectra (numpy only).

Every function takes an ``(m, m)`` similarity / adjacency matrix ``W`` (or the NLI probabilities it is built from)
and returns plain floats or arrays. Formulas follow D²-RAG spec §3.3 (Lin, Trivedi & Sun 2023, paper eqs. 29–34;
Da et al. 2024, eqs. 26–27) and the DENSE spec §4.5–4.6 (eq. 6).
"""

from __future__ import annotations

import re
import string

import numpy as np

from workbench.data.nli_labels import CONTRADICTION, ENTAILMENT

_PROB_FLOOR = 1e-12


def as_nli_probs(probs: object, n: int | None = None) -> np.ndarray:
    """``probs`` as a float ``(m, m, 3)`` array; raises ``ValueError`` on another shape (or ``m != n`` if given)."""
    arr = np.asarray(probs, dtype=float)
    if arr.ndim != 3 or arr.shape[0] != arr.shape[1] or arr.shape[2] != 3:
        raise ValueError(f"NLI probabilities must have shape (m, m, 3), got {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"NLI probabilities cover {arr.shape[0]} texts, expected {n}")
    return arr


def temper_probs(probs: np.ndarray, temperature: float) -> np.ndarray:
    """Re-derive softmax(z / T) from p = softmax(z) along the last axis: softmax(log p / T).

    Exact for logits z because log p = z − logsumexp(z) and the per-row shift cancels in the softmax. Probabilities
    are floored at 1e-12 before the log (a one-hot input stays one-hot up to ~1e-4 at T = 3). ``temperature = 1``
    returns the input renormalised.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    logits = np.log(np.clip(np.asarray(probs, dtype=float), _PROB_FLOOR, None)) / temperature
    logits -= logits.max(axis=-1, keepdims=True)
    out = np.exp(logits)
    return out / out.sum(axis=-1, keepdims=True)


def lin_affinity(probs: np.ndarray, temperature: float = 3.0) -> np.ndarray:
    """Lin et al. affinity W from pairwise NLI probabilities (spec §3.3, "Affinity matrix W").

    W_ij = ½[(1 − P_contra(i→j)) + (1 − P_contra(j→i))] with P = softmax(logits / temperature) (TTLM: 3.0,
    re-derived from the temperature-1 probabilities by :func:`temper_probs`); W_ii = 1. Symmetric, entries in [0, 1].
    """
    arr = as_nli_probs(probs)
    p_contra = temper_probs(arr, temperature)[..., CONTRADICTION]
    w = 0.5 * ((1.0 - p_contra) + (1.0 - p_contra.T))
    np.fill_diagonal(w, 1.0)
    return w


def degrees(w: np.ndarray) -> np.ndarray:
    """Degree vector D_i = Σ_j W_ij (row sums, self-loop included)."""
    return np.asarray(w, dtype=float).sum(axis=1)


def sym_normalized_laplacian(w: np.ndarray) -> np.ndarray:
    """L = I − D^{−1/2} W D^{−1/2} (symmetric normalised Laplacian; eigenvalues in [0, 2]). Zero degrees give 0 rows."""
    w = np.asarray(w, dtype=float)
    d = degrees(w)
    inv_sqrt = np.where(d > 0, 1.0 / np.sqrt(np.where(d > 0, d, 1.0)), 0.0)
    return np.eye(len(w)) - inv_sqrt[:, None] * w * inv_sqrt[None, :]


def sum_eigen_uncertainty(w: np.ndarray) -> float:
    """U_EigV = Σ_k max(0, 1 − λ_k(L)) over the eigenvalues of the symmetric normalised Laplacian (eq. 30).

    ≈ 1 for one tight cluster, ≈ m for m mutually dissimilar answers (a soft count of clusters).
    """
    lam = np.linalg.eigvalsh(sym_normalized_laplacian(w))
    return float(np.clip(1.0 - lam, 0.0, None).sum())


def degree_uncertainty(w: np.ndarray) -> float:
    """U_Deg = trace(m·I − D) / m² = 1 − Σ_i D_i / m² (eq. 31). 0 when all W_ij = 1; (m − 1)/m when W = I."""
    w = np.asarray(w, dtype=float)
    m = len(w)
    return float((m * m - degrees(w).sum()) / (m * m))


def degree_confidence(w: np.ndarray, j: int) -> float:
    """C_Deg(j) = D_jj / m (eq. 32): the average affinity of answer j to all m answers (itself included)."""
    w = np.asarray(w, dtype=float)
    return float(degrees(w)[j] / len(w))


def spectral_embedding(w: np.ndarray, eigen_threshold: float = 0.9) -> np.ndarray:
    """Rows of the eigenvectors of L (symmetric normalised) whose eigenvalue is < ``eigen_threshold`` (TTLM: 0.9).

    Returns ``(m, k)``; k ≥ 1 for any W with positive degrees because λ_min(L) = 0. Lin et al. keep the k smallest.
    """
    lam, vecs = np.linalg.eigh(sym_normalized_laplacian(w))
    keep = lam < eigen_threshold
    if not keep.any():
        keep = lam == lam.min()
    return vecs[:, keep]


def eccentricities(w: np.ndarray, eigen_threshold: float = 0.9) -> np.ndarray:
    """‖v′_j‖₂ for every answer j: v′_j = v_j − mean_j(v_j), v_j = row j of :func:`spectral_embedding` (eq. 33).

    Invariant to the sign and rotation of eigenvectors within an eigenspace (the centring commutes with them).
    """
    v = spectral_embedding(w, eigen_threshold)
    centred = v - v.mean(axis=0, keepdims=True)
    return np.linalg.norm(centred, axis=1)


def eccentricity_uncertainty(w: np.ndarray, eigen_threshold: float = 0.9, stacked: bool = False) -> float:
    """U_Ecc: Σ_j ‖v′_j‖₂ (TTLM, default) or ‖[v′_1; …; v′_m]‖₂ (Lin et al., paper eq. 33; ``stacked=True``)."""
    ecc = eccentricities(w, eigen_threshold)
    return float(np.sqrt((ecc**2).sum()) if stacked else ecc.sum())


def random_walk_laplacian(w: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """L_rw = I − diag(1 / (rowsum(W) + eps)) W (Da et al., eq. 26 with W in place of A as in TTLM)."""
    w = np.asarray(w, dtype=float)
    return np.eye(len(w)) - w / (w.sum(axis=1, keepdims=True) + eps)


def random_walk_eigen_uncertainty(w: np.ndarray, eps: float = 1e-6) -> float:
    """U = Σ_k max(0, 1 − |Re λ_k(L_rw)|) (Da et al., eq. 27): ≈ 1 when all answers agree, → m when all differ."""
    lam = np.linalg.eigvals(random_walk_laplacian(w, eps))
    return float(np.clip(1.0 - np.abs(lam.real), 0.0, None).sum())


_PUNCT_TABLE = str.maketrans("", "", string.punctuation)
_WS = re.compile(r"\s+")


def word_set(text: str) -> frozenset[str]:
    """Lower-cased, ASCII-punctuation-stripped, whitespace-split word set of ``text`` (DEG's Jaccard tokens)."""
    return frozenset(w for w in _WS.split(text.lower().translate(_PUNCT_TABLE)) if w)


def jaccard_matrix(texts: list[str]) -> np.ndarray:
    """T_ij = |S_i ∩ S_j| / |S_i ∪ S_j| over :func:`word_set`; T_ii = 1; two empty word sets count as identical (1)."""
    sets = [word_set(t) for t in texts]
    m = len(sets)
    out = np.eye(m)
    for i in range(m):
        for j in range(i + 1, m):
            union = sets[i] | sets[j]
            value = len(sets[i] & sets[j]) / len(union) if union else 1.0
            out[i, j] = out[j, i] = value
    return out


def dense_adjacency(probs: np.ndarray, rule: str = "argmax") -> np.ndarray:
    """DENSE semantic adjacency (DENSE spec §4.5, eq. 5): w_ij = (NLI(i, j) + NLI(j, i)) / 2, w_ii = 1.

    ``rule="argmax"`` (default, spec): NLI(a, b) = 1 when the judge's most probable class is entailment, else 0
    (contradiction and neutral both give 0), so w ∈ {0, ½, 1}. ``rule="soft"``: NLI(a, b) = P_entail(a → b).
    """
    arr = as_nli_probs(probs)
    if rule == "argmax":
        nli = (arr.argmax(axis=-1) == ENTAILMENT).astype(float)
    elif rule == "soft":
        nli = arr[..., ENTAILMENT]
    else:
        raise ValueError(f"unknown DENSE adjacency rule {rule!r}; use 'argmax' or 'soft'")
    w = 0.5 * (nli + nli.T)
    np.fill_diagonal(w, 1.0)
    return w


def degree_semantic_entropy(w: np.ndarray, eps: float = 1e-4) -> float:
    """DSE = −(1/n) Σ_i ln(D_i / n), D_i = Σ_j w_ij, n = k + 1 responses (DENSE eq. 6).

    Range [0, ln n]: 0 when every response agrees with every other (D_i = n), ln n when each agrees only with itself
    (D_i = 1). ``eps`` only floors D_i / n inside the log (a guard: with w_ii = 1, D_i ≥ 1 always).
    """
    w = np.asarray(w, dtype=float)
    n = len(w)
    ratio = np.maximum(degrees(w) / n, eps)
    return float(-np.log(ratio).mean())
