"""Rejection metrics (PRR, rejection curve, AURAC, risk-coverage, AURC) and Spearman on hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from workbench.metrics.rejection import (
    aurac,
    aurc,
    prr,
    rejection_curve,
    risk_coverage_curve,
    spearman,
)

CONF4 = [0.9, 0.8, 0.7, 0.6]
CORR4 = [1, 0, 1, 0]


def _polygraph_reference(uncertainty: np.ndarray, target: np.ndarray, max_rejection: float = 1.0) -> float:
    """A plain-loop restatement of LM-Polygraph's normalised PRR (estimator = uncertainty, 1000 shuffles, seed 42)."""

    def area(est: np.ndarray, tgt: np.ndarray) -> float:
        tgt = (tgt - tgt.min()) / (tgt.max() - tgt.min())
        n = len(est)
        r = int(max_rejection * n)
        srt = tgt[np.argsort(est)]
        return sum(srt[:k].mean() for k in range(n - r + 1, n + 1)) / r

    rs = np.random.RandomState(42)
    perm = np.arange(len(target))
    rand = []
    for _ in range(1000):
        rs.shuffle(perm)
        rand.append(area(perm, target))
    random = np.mean(rand)
    oracle = area(-target, target)
    return (area(uncertainty, target) - random) / (oracle - random)


# --- rejection curve ------------------------------------------------------------------------------------------


def test_rejection_curve_hand_computed():
    # most confident first: correctness 1, 0, 1, 0
    # reject 0: mean(1,0,1,0) = 1/2; reject 1: mean(1,0,1) = 2/3; reject 2: mean(1,0) = 1/2; reject 3: mean(1) = 1
    rates, kept = rejection_curve(CONF4, CORR4)
    np.testing.assert_allclose(rates, [0.0, 0.25, 0.5, 0.75])
    np.testing.assert_allclose(kept, [0.5, 2 / 3, 0.5, 1.0])


def test_rejection_curve_ties_average_the_block():
    # confidences 1, 1, 0: the first two tie, each position in the block gets mean(1, 0) = 1/2
    # kept: reject 0 → mean(1/2, 1/2, 1) = 2/3; reject 1 → mean(1/2, 1/2) = 1/2; reject 2 → 1/2
    rates, kept = rejection_curve([1.0, 1.0, 0.0], [1, 0, 1])
    np.testing.assert_allclose(rates, [0.0, 1 / 3, 2 / 3])
    np.testing.assert_allclose(kept, [2 / 3, 0.5, 0.5])


def test_rejection_curve_empty_after_nan():
    rates, kept = rejection_curve([float("nan")], [1.0])
    assert rates.size == 0 and kept.size == 0


# --- PRR --------------------------------------------------------------------------------------------------------


def test_prr_hand_computed_four():
    # order (most confident first) 1, 0, 1, 0; top-k means m = 1, 1/2, 2/3, 1/2
    # A_unc = (m4 + m3 + m2 + m1) / 4 = (1/2 + 2/3 + 1/2 + 1) / 4 = 2/3
    # oracle order 1, 1, 0, 0: m = 1, 1, 2/3, 1/2 → A_oracle = (1/2 + 2/3 + 1 + 1) / 4 = 19/24
    # A_random = mean = 1/2 → PRR = (2/3 - 1/2) / (19/24 - 1/2) = (1/6) / (7/24) = 4/7
    assert prr(CONF4, CORR4) == pytest.approx(4 / 7)


def test_prr_hand_computed_five_and_max_rejection():
    # order 1, 0, 1, 0, 1: m1..m5 = 1, 1/2, 2/3, 1/2, 3/5; oracle 1, 1, 1, 0, 0: m = 1, 1, 1, 3/4, 3/5
    # full: A_unc = (3/5 + 1/2 + 2/3 + 1/2 + 1) / 5 = 49/75, A_oracle = (3/5 + 3/4 + 1 + 1 + 1) / 5 = 87/100,
    #   A_random = 3/5 → PRR = (49/75 - 3/5) / (87/100 - 3/5) = (4/75) / (27/100) = 16/81
    conf, q = [5, 4, 3, 2, 1], [1, 0, 1, 0, 1]
    assert prr(conf, q) == pytest.approx(16 / 81)
    # max_rejection 0.4 → r = int(2.0) = 2 points (m5, m4): A_unc = (3/5 + 1/2) / 2 = 11/20,
    #   A_oracle = (3/5 + 3/4) / 2 = 27/40 → PRR = (11/20 - 3/5) / (27/40 - 3/5) = (-1/20) / (3/40) = -2/3
    assert prr(conf, q, max_rejection=0.4) == pytest.approx(-2 / 3)


def test_prr_continuous_quality_is_minmax_normalised():
    # q = 0.2, 0.8, 0.5 → q̃ = 0, 1, 1/2; order by confidence: 0, 1, 1/2 → m = 0, 1/2, 1/2 → A_unc = 1/3
    # oracle 1, 1/2, 0 → m = 1, 3/4, 1/2 → A_oracle = 3/4; A_random = 1/2 → PRR = (-1/6) / (1/4) = -2/3
    assert prr([3, 2, 1], [0.2, 0.8, 0.5]) == pytest.approx(-2 / 3)
    # an affine change of the quality leaves PRR unchanged
    assert prr([3, 2, 1], [2.0, 8.0, 5.0]) == pytest.approx(-2 / 3)


def test_prr_ties_average_gives_zero_for_uninformative_ties():
    # two tie blocks {1, 0} and {1, 0}: both average to 1/2, the curve is flat at the mean → A_unc = A_random
    assert prr([1.0, 1.0, 0.0, 0.0], [1, 0, 1, 0]) == pytest.approx(0.0)


def test_prr_argsort_ties_follow_numpy_order():
    conf = np.array([1.0, 1.0, 0.0, 0.0])
    q = np.array([1.0, 0.0, 1.0, 0.0])
    order = np.argsort(-conf)  # the order LM-Polygraph would take
    expected = prr(-np.arange(4.0), q[order])  # no ties: the same positions, spelled out
    assert prr(conf, q, ties="argsort") == pytest.approx(expected)


def test_prr_matches_lm_polygraph_procedure():
    rng = np.random.default_rng(3)
    n = 60
    conf = np.round(rng.normal(size=n), 1)  # with ties
    q = (rng.random(n) < 1 / (1 + np.exp(-2 * conf))).astype(float)
    ref = _polygraph_reference(-conf, q)
    assert prr(conf, q, ties="argsort", n_permutations=1000, seed=42) == pytest.approx(ref, abs=1e-12)
    ref_half = _polygraph_reference(-conf, q, max_rejection=0.5)
    assert prr(conf, q, 0.5, ties="argsort", n_permutations=1000) == pytest.approx(ref_half, abs=1e-12)


def test_prr_properties():
    rng = np.random.default_rng(0)
    q = (rng.random(2000) < 0.6).astype(float)
    perfect = q + 0.01 * rng.random(2000)  # orders every correct above every wrong
    assert prr(perfect, q) == pytest.approx(1.0)
    assert prr(-perfect, q) < -0.5
    assert abs(prr(rng.random(2000), q)) < 0.08
    # the Monte-Carlo random baseline is close to its exact expectation
    s = q + rng.normal(size=2000)
    assert prr(s, q, n_permutations=200) == pytest.approx(prr(s, q), abs=0.02)


def test_prr_undefined_and_invalid():
    assert math.isnan(prr([0.1, 0.2, 0.3], [1, 1, 1]))  # one class: oracle = random
    assert math.isnan(prr([], []))
    assert math.isnan(prr([0.1, 0.2], [1, 0], max_rejection=0.4))  # int(0.8) = 0 rejection steps
    with pytest.raises(ValueError, match="equal length"):
        prr([0.1, 0.2], [1, 0, 1])
    with pytest.raises(ValueError, match="max_rejection"):
        prr([0.1, 0.2], [1, 0], max_rejection=0.0)
    with pytest.raises(ValueError, match="ties"):
        prr([0.1, 0.2], [1, 0], ties="first")


def test_prr_drops_nan_pairs():
    assert prr([*CONF4, float("nan"), 0.5], [*CORR4, 1.0, float("nan")]) == pytest.approx(4 / 7)


# --- AURAC, risk-coverage, AURC ------------------------------------------------------------------------------------


def test_aurac_hand_computed():
    # a_k (k most confident) = 1, 1/2, 2/3, 1/2 at x = 0, 1/3, 2/3, 1
    # trapezoid = (1/3) · [(1 + 1/2)/2 + (1/2 + 2/3)/2 + (2/3 + 1/2)/2] = (1/3) · (3/4 + 7/12 + 7/12) = 23/36
    assert aurac(CONF4, CORR4) == pytest.approx(23 / 36)


def test_aurac_properties():
    assert aurac([0.9, 0.1], [1, 0]) == pytest.approx(0.75)  # a = 1, 1/2 → (1 + 1/2) / 2
    assert aurac([0.1, 0.9], [1, 0]) == pytest.approx(0.25)  # a = 0, 1/2
    assert aurac([0.3, 0.2, 0.1], [1, 1, 1]) == pytest.approx(1.0)  # one class is fine: a flat curve
    assert math.isnan(aurac([0.5], [1]))


def test_risk_coverage_and_aurc_hand_computed():
    # risk_k = 1 - a_k = 0, 1/2, 1/3, 1/2 at coverage 1/4, 1/2, 3/4, 1 → AURC = (0 + 1/2 + 1/3 + 1/2) / 4 = 1/3
    coverage, risk = risk_coverage_curve(CONF4, CORR4)
    np.testing.assert_allclose(coverage, [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(risk, [0.0, 0.5, 1 / 3, 0.5])
    assert aurc(CONF4, CORR4) == pytest.approx(1 / 3)


def test_aurc_oracle_is_lower_than_reversed():
    q = np.array([1, 1, 1, 0, 0], dtype=float)
    assert aurc(q, q) < aurc(-q, q)
    assert math.isnan(aurc([], []))


# --- Spearman ---------------------------------------------------------------------------------------------------


def test_spearman_hand_computed():
    # ranks x = 1..5 (centred -2, -1, 0, 1, 2); ranks y = 1, 2, 3.5, 5, 3.5 (centred -2, -1, 0.5, 2, 0.5)
    # Σ dx·dy = 4 + 1 + 0 + 2 + 1 = 8; Σ dx² = 10; Σ dy² = 4 + 1 + 0.25 + 4 + 0.25 = 9.5 → ρ = 8 / sqrt(95)
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))


def test_spearman_matches_scipy_and_edge_cases():
    rng = np.random.default_rng(1)
    x, y = np.round(rng.normal(size=50), 1), np.round(rng.normal(size=50), 1)
    assert spearman(x, y) == pytest.approx(spearmanr(x, y)[0])
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(spearman([1.0], [2.0]))
    assert spearman([1, 2, float("nan"), 3], [1, 2, 0, 3]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="equal length"):
        spearman([1, 2], [1])
