"""DENSE: degree-based semantic entropy over answers under single-edit rephrased contexts (DENSE spec §4, eq. 6)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.uncertainty.features.base import Feature, has_nan
from workbench.uncertainty.graph_math import degree_semantic_entropy, dense_adjacency


@dataclass(frozen=True)
class Dense(Feature):
    """DSE = −(1/(k+1)) Σ_i ln(D_i / (k+1)) over the k+1 DENSE answers (DENSE eq. 6; Alg. 1 line 13).

    Adjacency (eq. 5, :func:`~workbench.uncertainty.graph_math.dense_adjacency`): w_ij = (NLI(i, j) + NLI(j, i)) / 2
    with NLI = 1 when the judge's argmax label is entailment (``rule="argmax"``, spec; contradiction and neutral give
    0) or P_entail (``rule="soft"``); w_ii = 1 without a call; D_i = Σ_j w_ij. DSE ∈ [0, ln(k+1)]: 0 when all agree,
    ln(k+1) when all differ. ↑ = uncertain, orientation −1 (DENSE calls a question certain when DSE ≤ 0.2).
    NaN when there is no answer.
    """

    rule: str = "argmax"
    eps: float = 1e-4

    name = "dense"
    category = "consistency"
    orientation = -1
    stats = ("dense_answers", "dense_nli_probs")

    def raw(self, stats: Mapping[str, Any]) -> float:
        answers = list(self._stat(stats, "dense_answers"))
        probs = np.asarray(self._stat(stats, "dense_nli_probs"), dtype=float)
        if not answers:
            return float("nan")
        if probs.shape != (len(answers), len(answers), 3):
            raise self._bad(f"dense_nli_probs has shape {probs.shape} for {len(answers)} answers")
        if has_nan(probs):
            return float("nan")
        return degree_semantic_entropy(dense_adjacency(probs, self.rule), self.eps)
