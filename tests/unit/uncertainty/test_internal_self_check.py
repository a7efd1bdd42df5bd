"""INSIDE / EigenScore, Attention Score, P(True) and verbalized-confidence parsing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.core.errors import DataError
from workbench.uncertainty.features import FEATURES, parse_verbalized_confidence
from workbench.uncertainty.features.internal import eigen_score


def test_eigen_score_identical_hidden_states():
    z = np.tile([1.0, 2.0, 3.0, 4.0], (3, 1))
    # centred row = [−1.5, −0.5, 0.5, 1.5], ‖·‖² = 5 → Σ = 5·J₃, eigenvalues {15, 0, 0}
    # E = (ln(15 + α) + 2 ln α)/3 with α = 1e-3 = (2.708117 − 13.815511)/3
    expected = (math.log(15.001) + 2 * math.log(1e-3)) / 3
    assert eigen_score(z) == pytest.approx(expected)
    assert expected == pytest.approx(-3.702465, abs=1e-6)


def test_eigen_score_orthogonal_hidden_states():
    z = np.eye(8)[:4]  # 4 orthogonal one-hot states in d = 8
    # centred rows e_i − 1/8 → Σ = I₄ − J₄/8, eigenvalues {1, 1, 1, 1 − 4/8 = 0.5}
    expected = (3 * math.log(1.001) + math.log(0.501)) / 4
    assert eigen_score(z) == pytest.approx(expected)
    identical = {"sample_hidden": np.tile(np.arange(8.0), (4, 1))}
    orthogonal = {"sample_hidden": z}
    # more diverse → higher EigenScore → lower oriented value (orientation −1)
    assert FEATURES["inside"].compute(identical) > FEATURES["inside"].compute(orthogonal)


def test_inside_uses_first_ten_samples_and_degenerate_inputs():
    z = np.vstack([np.eye(12)[:10], np.tile(np.arange(12.0), (5, 1))])
    assert FEATURES["inside"].raw({"sample_hidden": z}) == pytest.approx(eigen_score(z[:10]))
    # a single sample: Σ = ‖z_c‖² (1×1) → E = ln(‖z_c‖² + α); centred [−1, 1] → ln(2.001)
    assert FEATURES["inside"].raw({"sample_hidden": [[1.0, 3.0]]}) == pytest.approx(math.log(2.001))
    assert math.isnan(FEATURES["inside"].raw({"sample_hidden": np.zeros((0, 4))}))
    with pytest.raises(DataError):
        FEATURES["inside"].raw({"sample_hidden": np.zeros(4)})


def test_attention_score_mean_log_diagonal():
    logdiag = np.log([[0.5, 0.25], [0.5, 0.5]])
    # (3 ln 0.5 + ln 0.25)/4 = (−2.079442 − 1.386294)/4 = −0.866434
    assert FEATURES["attention_score"].compute({"attention_logdiag": logdiag}) == pytest.approx(-0.866434, abs=1e-6)
    assert math.isnan(FEATURES["attention_score"].raw({"attention_logdiag": np.zeros((2, 0))}))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("85", 0.85),
        ("I'd say 70%", 0.70),
        ("none", 0.0),
        ("", 0.0),
        ("Confidence: 92.5.", 0.925),
        ("70 out of 100", 0.70),
        ("150", 1.0),
    ],
)
def test_parse_verbalized_confidence(text, expected):
    assert parse_verbalized_confidence(text) == pytest.approx(expected)


def test_verbalized_and_ptrue_features():
    assert FEATURES["verbalized_confidence"].compute({"verbalized_confidence": 0.7}) == pytest.approx(0.7)
    with pytest.raises(DataError, match="verbalized_confidence"):
        FEATURES["verbalized_confidence"].compute({"verbalized_confidence": 1.5})
    assert FEATURES["ptrue"].compute({"ptrue": 0.8}) == pytest.approx(0.8)
    assert math.isnan(FEATURES["ptrue"].compute({"ptrue": float("nan")}))
    with pytest.raises(DataError):
        FEATURES["ptrue"].compute({"ptrue": 1.5})
