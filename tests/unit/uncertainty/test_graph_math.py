"""Graph maths on hand-made matrices: affinity, degrees, Laplacian spectra, eccentricity, DEG, DSE."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.unit.uncertainty.helpers import E, N, block_labels, onehot_nli
from workbench.uncertainty import graph_math as gm


def test_temper_probs_equals_softmax_of_scaled_logits():
    z = np.array([2.0, 0.0, -1.0])
    p = np.exp(z) / np.exp(z).sum()
    # softmax(z / 3) computed directly from the logits
    expected = np.exp(z / 3) / np.exp(z / 3).sum()
    assert gm.temper_probs(p, 3.0) == pytest.approx(expected, abs=1e-12)
    assert gm.temper_probs(p, 1.0) == pytest.approx(p, abs=1e-12)
    with pytest.raises(ValueError):
        gm.temper_probs(p, 0.0)


def test_lin_affinity_averages_both_directions():
    probs = np.zeros((2, 2, 3))
    probs[0, 1] = [0.2, 0.3, 0.5]  # P_contra(0→1) = 0.2
    probs[1, 0] = [0.4, 0.1, 0.5]  # P_contra(1→0) = 0.4
    probs[0, 0] = probs[1, 1] = [0.0, 0.0, 1.0]
    w = gm.lin_affinity(probs, temperature=1.0)
    # W_01 = ½[(1 − 0.2) + (1 − 0.4)] = ½(0.8 + 0.6) = 0.7; W_ii = 1
    assert w == pytest.approx(np.array([[1.0, 0.7], [0.7, 1.0]]))
    # tempering at T=3 flattens the distribution, so P_contra moves towards 1/3 and W_01 moves towards 2/3
    w3 = gm.lin_affinity(probs, temperature=3.0)
    assert 2 / 3 < w3[0, 1] < 0.7


def test_degree_uncertainty_and_confidence():
    w = np.array([[1.0, 0.5, 0.0], [0.5, 1.0, 0.5], [0.0, 0.5, 1.0]])
    # D = [1.5, 2.0, 1.5], Σ D = 5, m = 3: U_Deg = (m² − Σ D)/m² = (9 − 5)/9 = 4/9
    assert gm.degree_uncertainty(w) == pytest.approx(4 / 9)
    # C_Deg(j=2) = D_22 / m = 1.5 / 3 = 0.5 ; C_Deg(j=1) = 2 / 3
    assert gm.degree_confidence(w, 2) == pytest.approx(0.5)
    assert gm.degree_confidence(w, 1) == pytest.approx(2 / 3)
    # all ones → U_Deg = 0; identity → (m − 1)/m
    assert gm.degree_uncertainty(np.ones((4, 4))) == pytest.approx(0.0)
    assert gm.degree_uncertainty(np.eye(4)) == pytest.approx(3 / 4)


def test_sum_eigen_uncertainty():
    # all ones (m=4): L = I − J/4, eigenvalues {0, 1, 1, 1} → U = (1 − 0) + 3·0 = 1
    assert gm.sum_eigen_uncertainty(np.ones((4, 4))) == pytest.approx(1.0)
    # identity: L = 0, four eigenvalues 0 → U = 4
    assert gm.sum_eigen_uncertainty(np.eye(4)) == pytest.approx(4.0)
    # two blocks of two: eigenvalues {0, 0, 1, 1} → U = 2
    w = np.kron(np.eye(2), np.ones((2, 2)))
    assert gm.sum_eigen_uncertainty(w) == pytest.approx(2.0)
    # 2×2 with off-diagonal a = 0.5: D = 1.5, eigenvalues {0, 2a/(1+a) = 2/3} → U = 1 + (1 − 2/3) = 4/3
    assert gm.sum_eigen_uncertainty(np.array([[1.0, 0.5], [0.5, 1.0]])) == pytest.approx(4 / 3)


def test_eccentricity_two_groups_vs_all_equal():
    # all equal (m=5): only λ = 0 < 0.9, eigenvector constant → centred rows are 0 → U_Ecc = 0
    assert gm.eccentricity_uncertainty(np.ones((5, 5))) == pytest.approx(0.0, abs=1e-9)
    assert gm.eccentricities(np.ones((5, 5))) == pytest.approx(np.zeros(5), abs=1e-9)
    # groups {0,1}, {2,3}: λ = 0 twice; the embedding rows are (1/√2, 0) and (0, 1/√2) (up to rotation);
    # mean row = (1/(2√2), 1/(2√2)); each centred row has norm √(2·1/8) = 1/2
    w = np.kron(np.eye(2), np.ones((2, 2)))
    assert gm.eccentricities(w) == pytest.approx(np.full(4, 0.5))
    assert gm.eccentricity_uncertainty(w) == pytest.approx(2.0)  # TTLM: Σ_j ‖v′_j‖ = 4 · 1/2
    assert gm.eccentricity_uncertainty(w, stacked=True) == pytest.approx(1.0)  # Lin: √(4 · 1/4)


def test_random_walk_deg_identical_vs_disjoint_and_partial():
    # identical answers: W = A + T = 2·J (m=5) → L_rw ≈ I − J/5, eigenvalues {0, 1, 1, 1, 1} → U ≈ 1
    assert gm.random_walk_eigen_uncertainty(2 * np.ones((5, 5))) == pytest.approx(1.0, abs=1e-5)
    # disjoint: W = 2·I → L_rw ≈ 0 → U ≈ 5
    assert gm.random_walk_eigen_uncertainty(2 * np.eye(5)) == pytest.approx(5.0, abs=1e-5)
    # W = [[2, 1.0], [0.8, 2]]: rows sum to 3 and 2.8 → L_rw = [[1/3, −1/3], [−2/7, 2/7]],
    # trace 13/21, det 0 → eigenvalues {0, 13/21} → U = 1 + (1 − 13/21) = 29/21
    w = np.array([[2.0, 1.0], [0.8, 2.0]])
    assert gm.random_walk_eigen_uncertainty(w) == pytest.approx(29 / 21, abs=1e-5)


def test_jaccard_matrix():
    t = gm.jaccard_matrix(["The cat sat.", "the CAT ran", "", "  "])
    # {the, cat, sat} vs {the, cat, ran}: |∩| = 2, |∪| = 4 → 0.5
    assert t[0, 1] == pytest.approx(0.5) and t[1, 0] == pytest.approx(0.5)
    assert t[0, 2] == 0.0  # non-empty vs empty
    assert t[2, 3] == 1.0  # two empty word sets count as identical
    assert np.diag(t) == pytest.approx(np.ones(4))


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        ([0, 0, 0, 0, 0, 0], 0.0),  # all agree
        ([0, 1, 2, 3, 4, 5], math.log(6)),  # all distinct: D_i = 1 → −ln(1/6) = 1.791759
        ([0, 1, 1, 1, 1, 1], 0.450561),  # 5+1: −(1/6)[ln(1/6) + 5 ln(5/6)] = (1.791759 + 0.911608)/6
        ([0, 0, 0, 1, 1, 1], math.log(2)),  # 3+3: D_i = 3 → −ln(3/6)
    ],
)
def test_dse_spec_values(groups, expected):
    w = gm.dense_adjacency(onehot_nli(block_labels(groups), confidence=0.9))
    assert gm.degree_semantic_entropy(w) == pytest.approx(expected, abs=1e-6)


def test_dse_broken_pair_and_half_edge():
    labels = block_labels([0] * 6)
    labels[0][1] = labels[1][0] = N  # one symmetric broken pair (neutral both ways → w = 0)
    w = gm.dense_adjacency(onehot_nli(labels))
    # D = [5, 5, 6, 6, 6, 6] → DSE = −(2/6) ln(5/6) = 0.060774 (DENSE spec unit test)
    assert gm.degree_semantic_entropy(w) == pytest.approx(0.060774, abs=1e-6)
    labels[1][0] = E  # entailment in one direction only → w_01 = 0.5
    w = gm.dense_adjacency(onehot_nli(labels))
    assert w[0, 1] == 0.5
    # D = [5.5, 5.5, 6, 6, 6, 6] → −(2/6) ln(5.5/6) = 0.029001
    assert gm.degree_semantic_entropy(w) == pytest.approx(-(2 / 6) * math.log(5.5 / 6), abs=1e-9)


def test_dense_adjacency_soft_rule_and_errors():
    probs = onehot_nli(block_labels([0, 0]), confidence=0.8)  # P_entail = 0.8 off the diagonal
    assert gm.dense_adjacency(probs, rule="soft")[0, 1] == pytest.approx(0.8)
    with pytest.raises(ValueError):
        gm.dense_adjacency(probs, rule="bogus")
    with pytest.raises(ValueError):
        gm.as_nli_probs(np.zeros((2, 3, 3)))
