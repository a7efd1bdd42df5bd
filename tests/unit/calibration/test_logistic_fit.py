"""The one logistic fit (Platt, LARS and the LR classifier share it): the optimum's gradient vanishes, the penalty
shrinks, the sigmoid never overflows, bad shapes are refused."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.calibration.logistic_fit import fit_logistic_newton, logistic_loss, sigmoid
from workbench.core.errors import DataError


def _data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = (rng.random(n) < sigmoid(X @ np.array([1.5, -1.0, 0.0]) + 0.4)).astype(float)
    return np.hstack([X, np.ones((n, 1))]), y


@pytest.mark.parametrize("l2", [0.0, 0.5, 10.0])
def test_the_penalised_gradient_vanishes_at_the_fit(l2):
    design, y = _data()
    penalty = np.array([l2, l2, l2, 0.0])
    theta = fit_logistic_newton(design, y, penalty)
    grad = design.T @ (sigmoid(design @ theta) - y) + penalty * theta
    assert np.max(np.abs(grad)) < 1e-8
    nudged = theta + np.array([1e-3, 0, 0, 0])
    assert logistic_loss(design, theta, y, penalty) < logistic_loss(design, nudged, y, penalty)


def test_a_stronger_penalty_shrinks_the_weights_not_the_intercept():
    design, y = _data()
    weak = fit_logistic_newton(design, y, np.array([0.1, 0.1, 0.1, 0.0]))
    strong = fit_logistic_newton(design, y, np.array([100.0, 100.0, 100.0, 0.0]))
    assert np.linalg.norm(strong[:3]) < 0.5 * np.linalg.norm(weak[:3])
    assert sigmoid(strong[3]) == pytest.approx(y.mean(), abs=0.05)  # the intercept still fits the base rate


def test_sigmoid_is_finite_and_symmetric_at_extremes():
    z = np.array([-1e4, -50.0, 0.0, 50.0, 1e4])
    out = sigmoid(z)
    assert np.isfinite(out).all() and out[0] == 0.0 and out[2] == 0.5 and out[-1] == 1.0
    assert np.allclose(out + sigmoid(-z), 1.0)


def test_bad_shapes_and_values_are_refused():
    design, y = _data(10)
    with pytest.raises(DataError, match="does not match"):
        fit_logistic_newton(design, y[:5])
    with pytest.raises(DataError, match="non-finite"):
        fit_logistic_newton(np.where(design == design[0, 0], np.nan, design), y)
