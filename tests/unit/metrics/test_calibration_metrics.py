"""ECE, reliability table and Brier score on hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.metrics.calibration import brier, ece, reliability_table


def test_ece_uniform_hand_computed():
    # bins of width 0.1, right-closed: [0, .1] holds .05 (label 0) → gap .05, weight 1/5
    # (.1, .2] holds .15, .15 (labels 0, 1) → mean .15, observed .5, gap .35, weight 2/5
    # (.8, .9] holds .85 (label 1) → gap .15; (.9, 1] holds .95 (label 1) → gap .05
    # ECE = (1·.05 + 2·.35 + 1·.15 + 1·.05) / 5 = .95 / 5 = .19
    assert ece([0.05, 0.15, 0.15, 0.85, 0.95], [0, 0, 1, 1, 1]) == pytest.approx(0.19)


def test_ece_quantile_hand_computed():
    # 2 quantile bins: edges = quantiles 0, .5, 1 of (.1, .2, .3, .4) = .1, .25, .4
    # bin 1: .1, .2 (labels 0, 0) → |0 - .15| = .15; bin 2: .3, .4 (labels 1, 1) → |1 - .35| = .65
    # ECE = .5·.15 + .5·.65 = .4
    assert ece([0.1, 0.2, 0.3, 0.4], [0, 0, 1, 1], n_bins=2, strategy="quantile") == pytest.approx(0.4)


def test_ece_zero_when_bins_are_calibrated():
    # .25 predicted four times with one positive; .75 four times with three positives
    p = [0.25] * 4 + [0.75] * 4
    y = [1, 0, 0, 0, 1, 1, 1, 0]
    assert ece(p, y) == pytest.approx(0.0)
    assert ece(p, y, strategy="quantile") == pytest.approx(0.0)


def test_reliability_table():
    table = reliability_table([0.05, 0.15, 0.15, 0.85, 0.95], [0, 0, 1, 1, 1], n_bins=10)
    np.testing.assert_array_equal(table.count, [1, 2, 0, 0, 0, 0, 0, 0, 1, 1])
    np.testing.assert_allclose(table.mean_predicted[[0, 1, 8, 9]], [0.05, 0.15, 0.85, 0.95])
    np.testing.assert_allclose(table.observed[[0, 1, 8, 9]], [0.0, 0.5, 1.0, 1.0])
    assert np.isnan(table.mean_predicted[2]) and np.isnan(table.observed[2])
    np.testing.assert_allclose(table.edges, np.linspace(0, 1, 11))
    # the ends 0 and 1 fall in the first and last bins
    assert reliability_table([0.0, 1.0], [0, 1], n_bins=4).count.tolist() == [1, 0, 0, 1]


def test_brier_constant_predictions():
    # constant .3 with labels 1, 0, 0, 0: (.7² + 3·.3²) / 4 = (.49 + .27) / 4 = .19
    assert brier([0.3] * 4, [1, 0, 0, 0]) == pytest.approx(0.19)
    # constant .5 scores .25 whatever the labels
    assert brier([0.5] * 5, [1, 0, 1, 1, 0]) == pytest.approx(0.25)
    assert brier([1.0, 0.0], [1, 0]) == pytest.approx(0.0)


def test_invalid_and_nan_inputs():
    assert math.isnan(ece([], []))
    assert math.isnan(brier([float("nan")], [1]))
    assert brier([0.3, float("nan")], [1, 0]) == pytest.approx(0.49)
    with pytest.raises(ValueError, match="equal length"):
        ece([0.1, 0.2], [1])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        brier([1.5], [1])
    with pytest.raises(ValueError, match="strategy"):
        ece([0.1], [1], strategy="kmeans")
    with pytest.raises(ValueError, match="n_bins"):
        ece([0.1], [1], n_bins=0)
