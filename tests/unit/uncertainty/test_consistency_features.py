"""Consistency features computed from stats dictionaries (answer-set selection from the shared NLI matrix)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.unit.uncertainty.helpers import C, E, block_labels, onehot_nli
from workbench.core.errors import DataError
from workbench.uncertainty.features import FEATURES
from workbench.uncertainty.features.consistency import SemanticEntropy
from workbench.uncertainty.features.graph import (
    EccentricityConfidence,
    MatrixDegreeConfidence,
    MatrixDegreeUncertainty,
    SumEigenUncertainty,
)

LN = math.log


def _se_stats() -> dict:
    # unique texts: 0 "paris", 1 "Paris, France" (equivalent to 0), 2 "lyon" (contradicts both)
    labels = [[E, E, C], [E, E, C], [C, C, E]]
    return {
        "nli_texts": ["paris", "Paris, France", "lyon"],
        "nli_index_samples": [0, 1, 0, 2, 0],
        "nli_probs": onehot_nli(labels, confidence=0.9),
        "sample_logprobs": [[LN(0.5)], [LN(0.3)], [LN(0.5)], [LN(0.2)], [LN(0.5)]],
    }


def test_semantic_entropy_feature_multiplicities():
    stats = _se_stats()
    # clusters: {s1, s2, s3, s5} (paris ×3, Paris France) and {s4} (lyon)
    # samples: p(c0) = 0.5 + 0.3 + 0.5 + 0.5 = 1.8, p(c1) = 0.2 → SE = −½(ln 1.8 + ln 0.2) = 0.510826
    assert FEATURES["semantic_entropy"].raw(stats) == pytest.approx(-(LN(1.8) + LN(0.2)) / 2)
    assert FEATURES["semantic_entropy"].compute(stats) == pytest.approx((LN(1.8) + LN(0.2)) / 2)
    # unique: p(c0) = 0.5 + 0.3 = 0.8 → SE = −½(ln 0.8 + ln 0.2) = 0.916291
    assert SemanticEntropy(multiplicity="unique").raw(stats) == pytest.approx(-(LN(0.8) + LN(0.2)) / 2)
    # ttlm: "paris" drawn 3× counts 3 · 3 · 0.5 = 4.5, + 0.3 → 4.8 → SE = −½(ln 4.8 + ln 0.2) = 0.020411
    assert SemanticEntropy(multiplicity="ttlm").raw(stats) == pytest.approx(-(LN(4.8) + LN(0.2)) / 2)


def test_semantic_entropy_degenerate_inputs():
    stats = _se_stats()
    one = {**stats, "nli_index_samples": [2], "sample_logprobs": [[LN(0.2)]]}
    assert FEATURES["semantic_entropy"].raw(one) == pytest.approx(-LN(0.2))  # one cluster: SE = −LNS
    none = {**stats, "nli_index_samples": [], "sample_logprobs": []}
    assert math.isnan(FEATURES["semantic_entropy"].raw(none))
    with pytest.raises(DataError):
        FEATURES["semantic_entropy"].raw({**stats, "sample_logprobs": [[LN(0.5)]]})
    with pytest.raises(DataError):
        FEATURES["semantic_entropy"].raw({**stats, "nli_index_samples": [0, 7]})


def _lin_stats() -> dict:
    # 5 distinct samples (positions 1..5) in two groups {1, 2} and {3, 4, 5}; the greedy answer (0) sides with {1, 2}
    groups = [0, 0, 0, 1, 1, 1]
    return {
        "nli_texts": ["g", "a", "b", "c", "d", "e"],
        "nli_index_greedy": 0,
        "nli_index_samples": [1, 2, 3, 4, 5],
        "nli_probs": onehot_nli(block_labels(groups), confidence=1.0),
    }


def test_lin_features_hand_computed_at_temperature_one():
    stats = _lin_stats()
    # samples 1-5: W = blocks of 2 and 3 (0 across) → D = [2, 2, 3, 3, 3], Σ D = 13 → U_Deg = (25 − 13)/25 = 0.48
    assert MatrixDegreeUncertainty(temperature=1.0).raw(stats) == pytest.approx(0.48, abs=1e-9)
    # each all-ones block of size s has L = I − J/s, eigenvalues {0, 1, …}: λ(L) = {0, 0, 1, 1, 1} → U_EigV = 2
    assert SumEigenUncertainty(temperature=1.0).raw(stats) == pytest.approx(2.0, abs=1e-9)
    # samples 1-4 + greedy: greedy row of W = [1, 1, 0, 0, 1] → D = 3 → C_Deg = 3/5
    assert MatrixDegreeConfidence(temperature=1.0).raw(stats) == pytest.approx(0.6, abs=1e-9)
    # set {a, b, c, d, greedy}: groups {a, b, greedy} and {c, d}; rows of the λ=0 embedding are
    # (1/√3, 0) for the first group and (0, 1/√2) for the second; mean row = (3/(5√3), 2/(5√2)) →
    # greedy's centred row = (2/(5√3), −2/(5√2)), norm² = 4/75 + 4/50 = 2/15
    assert EccentricityConfidence(temperature=1.0).raw(stats) == pytest.approx(math.sqrt(2 / 15), abs=1e-9)


def test_lin_features_default_temperature_and_degenerate_sets():
    stats = _lin_stats()
    # T = 3 softens the one-hot judgements: affinities across groups rise above 0, so U_Deg drops below 0.48
    assert 0.0 < FEATURES["matrix_degree_uncertainty"].raw(stats) < 0.48
    # no samples: uncertainty features are undefined; the confidence set is the greedy answer alone (C_Deg = 1)
    empty = {**stats, "nli_index_samples": []}
    for name in ("sum_eigen_uncertainty", "matrix_degree_uncertainty", "eccentricity_uncertainty"):
        assert math.isnan(FEATURES[name].raw(empty))
    assert FEATURES["matrix_degree_confidence"].raw(empty) == pytest.approx(1.0)
    assert FEATURES["eccentricity_confidence"].raw(empty) == pytest.approx(0.0)
    # one sample: W = [[1]] → U_EigV = 1, U_Deg = 0
    single = {**stats, "nli_index_samples": [1]}
    assert FEATURES["sum_eigen_uncertainty"].raw(single) == pytest.approx(1.0)
    assert FEATURES["matrix_degree_uncertainty"].raw(single) == pytest.approx(0.0)


def test_directional_entailment_graph_feature():
    probs = np.zeros((2, 2, 3))
    probs[0, 0] = probs[1, 1] = [0.0, 0.0, 1.0]
    probs[0, 1] = [0.25, 0.25, 0.5]  # P_entail(0 → 1) = 0.5
    probs[1, 0] = [0.35, 0.35, 0.3]  # P_entail(1 → 0) = 0.3
    stats = {"nli_texts": ["The cat sat.", "the cat ran"], "nli_index_samples": [0, 1], "nli_probs": probs}
    # A = [[1, .5], [.3, 1]], T_01 = |{the, cat}| / |{the, cat, sat, ran}| = 0.5 → W = [[2, 1], [.8, 2]] → U = 29/21
    assert FEATURES["directional_entailment_graph"].raw(stats) == pytest.approx(29 / 21, abs=1e-5)
    assert FEATURES["directional_entailment_graph"].compute(stats) == pytest.approx(-29 / 21, abs=1e-5)
    with pytest.raises(DataError):
        FEATURES["directional_entailment_graph"].raw({**stats, "nli_texts": ["only one"]})


def test_self_detection_feature():
    stats = {
        "paraphrase_answers": ["a", "a", "a", "b", "c"],
        "paraphrase_nli_probs": onehot_nli(block_labels([0, 0, 0, 1, 2])),
    }
    # cluster sizes 3, 1, 1 → −(0.6 ln 0.6 + 2 · 0.2 ln 0.2) = 0.950271
    assert FEATURES["self_detection"].raw(stats) == pytest.approx(0.950271, abs=1e-6)
    assert math.isnan(FEATURES["self_detection"].raw({"paraphrase_answers": [], "paraphrase_nli_probs": []}))
    with pytest.raises(DataError):
        FEATURES["self_detection"].raw({**stats, "paraphrase_answers": ["a"]})


def test_dense_feature():
    stats = {"dense_answers": ["x"] + ["y"] * 5, "dense_nli_probs": onehot_nli(block_labels([0, 1, 1, 1, 1, 1]))}
    # 5+1: D = [1, 5, 5, 5, 5, 5] → DSE = −(1/6)[ln(1/6) + 5 ln(5/6)] = 0.450561
    assert FEATURES["dense"].raw(stats) == pytest.approx(0.450561, abs=1e-6)
    assert FEATURES["dense"].compute(stats) == pytest.approx(-0.450561, abs=1e-6)
    assert FEATURES["dense"].raw({"dense_answers": ["x"], "dense_nli_probs": onehot_nli([[C]])}) == 0.0
    assert math.isnan(FEATURES["dense"].raw({"dense_answers": [], "dense_nli_probs": []}))
