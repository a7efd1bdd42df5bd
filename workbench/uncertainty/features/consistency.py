"""Clustering-based consistency features: Semantic Entropy and Self-Detection (D²-RAG spec §3.3 items 1 and 16)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.uncertainty.clustering import cluster_entropy, semantic_clusters, semantic_entropy
from workbench.uncertainty.features.base import Feature, has_nan, nli_answer_set, sample_lns


@dataclass(frozen=True)
class SemanticEntropy(Feature):
    """Semantic entropy over sampled answers (paper eqs. 17–19; Kuhn et al. 2023; TTLM ``SemanticEntropy``).

    The first ``n_samples`` (5) samples are clustered greedily from the shared question-prefixed NLI matrix
    (:func:`~workbench.uncertainty.clustering.semantic_clusters`; ``rule`` = ``"no_contradiction"`` (TTLM, default)
    or ``"mutual_entailment"``). SE = −(1/|C|) Σ_c ln Σ_{s∈c} exp(LNS(s)) with unnormalised sequence probabilities
    (eq. 19). ↑ = uncertain, orientation −1.

    ``multiplicity`` (see :func:`~workbench.uncertainty.clustering.semantic_entropy`): ``"samples"`` (default, clean:
    each sample counted once), ``"unique"`` (each distinct string once), ``"ttlm"`` (the n² duplicate quirk; all
    five samples identical with LNS ≈ 0 gives truth value ln 25). Samples with no scored token are dropped; NaN when
    none is left.
    """

    n_samples: int = 5
    rule: str = "no_contradiction"
    multiplicity: str = "samples"

    name = "semantic_entropy"
    category = "consistency"
    orientation = -1
    stats = ("sample_logprobs", "nli_probs", "nli_index_samples")

    def raw(self, stats: Mapping[str, Any]) -> float:
        probs, idx = nli_answer_set(self, stats, self.n_samples, with_greedy=False)
        logprobs = self._stat(stats, "sample_logprobs")
        if len(logprobs) < idx.size:
            raise self._bad(f"{len(logprobs)} sample log-prob lists for {idx.size} NLI sample positions")
        lns, keep = sample_lns(logprobs, idx.size)
        if lns.size == 0 or has_nan(probs, lns):
            return float("nan")
        clusters = semantic_clusters(probs[np.ix_(keep, keep)], self.rule)
        return semantic_entropy(clusters, lns, keys=idx[keep].tolist(), multiplicity=self.multiplicity)


@dataclass(frozen=True)
class SelfDetection(Feature):
    """Self-Detection: answer diversity across question paraphrases (paper eqs. 24–25; Zhao et al. 2024; TTLM).

    The P (5) answers to the question and its 4 paraphrases are clustered with the semantic-entropy rule on
    ``paraphrase_nli_probs`` (question-prefixed with the original question); raw = −Σ_l (N_l/P) ln(N_l/P) over
    cluster sizes (eq. 25, the entropy form; TTLM ``output_type="entropy"``). ↑ = uncertain, orientation −1. NaN
    when there is no answer.

    How the stats graph makes ``paraphrase_answers``: the 4 paraphrases are sampled in one call (n = 4, T = 1.0 as
    TTLM, the reply opened with "Reworded question:", one line, at most ⌈1.5 × the question's tokens⌉ + 4
    tokens), each reply stripped of preambles, labels, numbering and quotes (``calculators.clean_paraphrase``;
    nothing left → the question itself); every question is then answered greedily (the paper; TTLM samples at
    T = 0.7) in the same greedy call as the original question, whose answer is the greedy answer.
    Departures: TTLM asks for the paraphrases one at a time, listing the earlier ones so that each differs (4
    sequential calls); here sampling alone makes them differ (one call with a shared prefill). TTLM compares answers
    with NLI (as here); the paper's exact match for fixed-format answers is not used.

    Version 2: paraphrases cleaned of preambles (version 1 cut each reply at its first newline and answered
    "Sure! Here is a paraphrase:" as a question). Version 3: the reply opening, one line and the length cap above
    (version 2: no opening, no stop string, 64 tokens), so the paraphrases differ.
    """

    rule: str = "no_contradiction"

    version = "3"

    name = "self_detection"
    category = "consistency"
    orientation = -1
    stats = ("paraphrase_answers", "paraphrase_nli_probs")

    def raw(self, stats: Mapping[str, Any]) -> float:
        answers = list(self._stat(stats, "paraphrase_answers"))
        probs = np.asarray(self._stat(stats, "paraphrase_nli_probs"), dtype=float)
        if not answers:
            return float("nan")
        if probs.shape != (len(answers), len(answers), 3):
            raise self._bad(f"paraphrase_nli_probs has shape {probs.shape} for {len(answers)} answers")
        if has_nan(probs):
            return float("nan")
        return cluster_entropy(semantic_clusters(probs, self.rule))
