"""Semantic clustering of answers from a pairwise NLI matrix, and the entropies built on the clusters.

Used by Semantic Entropy (D²-RAG spec §3.3 item 1; paper eqs. 17–19; Kuhn et al. 2023) and Self-Detection (item 16;
eqs. 24–25). NLI probabilities are ``(n, n, 3)`` in (contradiction, neutral, entailment) order, premise i →
hypothesis j.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

import numpy as np

from workbench.uncertainty.graph_math import CONTRADICTION, ENTAILMENT, as_nli_probs

CLUSTER_RULES = ("no_contradiction", "mutual_entailment")
MULTIPLICITIES = ("samples", "unique", "ttlm")


def _equivalent(labels: np.ndarray, a: int, b: int, rule: str) -> bool:
    if rule == "no_contradiction":
        return bool(labels[a, b] != CONTRADICTION and labels[b, a] != CONTRADICTION)
    return bool(labels[a, b] == ENTAILMENT and labels[b, a] == ENTAILMENT)


def semantic_clusters(probs: np.ndarray, rule: str = "no_contradiction") -> np.ndarray:
    """Greedy clustering: answer m joins the FIRST existing cluster whose first member c_0 is equivalent to it.

    Equivalence uses the argmax NLI label in both directions (c_0 → m and m → c_0):

    * ``"no_contradiction"`` (default; TTLM, spec §3.3 item 1): neither direction is labelled contradiction.
    * ``"mutual_entailment"`` (Kuhn et al., the paper's wording): both directions are labelled entailment.

    Returns an ``int`` array of cluster ids ``0..C−1`` in order of first appearance (answer 0 is in cluster 0).
    """
    if rule not in CLUSTER_RULES:
        raise ValueError(f"unknown clustering rule {rule!r}; use one of {CLUSTER_RULES}")
    labels = as_nli_probs(probs).argmax(axis=-1)
    n = len(labels)
    out = np.empty(n, dtype=int)
    firsts: list[int] = []
    for m in range(n):
        for cid, first in enumerate(firsts):
            if _equivalent(labels, first, m, rule):
                out[m] = cid
                break
        else:
            out[m] = len(firsts)
            firsts.append(m)
    return out


def cluster_entropy(cluster_ids: Sequence[int] | np.ndarray) -> float:
    """Entropy of the cluster-size distribution: −Σ_l (N_l / n) ln(N_l / n) (Self-Detection, eq. 24 variant).

    0 when every answer is in one cluster; ln n when every answer is alone. NaN for no answers (undefined).
    """
    ids = list(np.asarray(cluster_ids).tolist())
    if not ids:
        return float("nan")
    n = len(ids)
    frac = np.array(list(Counter(ids).values()), dtype=float) / n
    return float(-(frac * np.log(frac)).sum())


def _logsumexp(values: np.ndarray) -> float:
    top = float(values.max())
    return top + float(np.log(np.exp(values - top).sum()))


def semantic_entropy(
    cluster_ids: Sequence[int] | np.ndarray,
    log_likelihoods: Sequence[float] | np.ndarray,
    keys: Sequence[Hashable] | None = None,
    multiplicity: str = "samples",
) -> float:
    """SE = −(1/|C|) Σ_c ln p(c|x), with p(c|x) = Σ_{s∈c} exp(ℓ_s) unnormalised (paper eq. 19; TTLM).

    ``log_likelihoods`` ℓ_s are the samples' length-normalised log-likelihoods LNS(s). ``keys`` identify equal strings
    (e.g. their index in the unique-text list; default: every sample distinct). ``multiplicity`` says how a string
    drawn several times enters its cluster's mass:

    * ``"samples"`` (default, the "clean" / de-duplicated variant of spec §13.15): every sample counted once — a
      string drawn n times contributes n·exp(ℓ), as in Kuhn et al.'s estimator. Frequency is the consistency signal.
    * ``"unique"``: every distinct string counted once — a string drawn n times contributes exp(ℓ). Frequency is
      ignored, so the score then reflects only the number of clusters and the sequence likelihoods.
    * ``"ttlm"``: TTLM's quirk — a string drawn n times contributes n²·exp(ℓ) (all 5 samples identical with ℓ ≈ 0
      gives truth value ln 25, as in the released data).

    NaN for no samples (undefined).
    """
    if multiplicity not in MULTIPLICITIES:
        raise ValueError(f"unknown multiplicity {multiplicity!r}; use one of {MULTIPLICITIES}")
    ids = np.asarray(cluster_ids, dtype=int)
    ll = np.asarray(log_likelihoods, dtype=float)
    if ids.shape != ll.shape:
        raise ValueError(f"{ids.size} cluster ids but {ll.size} log-likelihoods")
    if ids.size == 0:
        return float("nan")
    key_list: list[Hashable] = list(range(ids.size)) if keys is None else list(keys)
    if len(key_list) != ids.size:
        raise ValueError(f"{ids.size} samples but {len(key_list)} keys")
    counts = Counter(key_list)
    total = 0.0
    clusters = np.unique(ids)
    for cid in clusters:
        members = np.flatnonzero(ids == cid)
        if multiplicity == "unique":
            seen: dict[Hashable, int] = {}
            for i in members:
                seen.setdefault(key_list[i], int(i))
            terms = ll[list(seen.values())]
        elif multiplicity == "ttlm":
            terms = ll[members] + np.log([counts[key_list[i]] for i in members])
        else:
            terms = ll[members]
        total += _logsumexp(terms)
    return float(-total / len(clusters))
