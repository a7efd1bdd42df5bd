"""Beta calibration: the fit against its likelihood written out by hand, the a, b ≥ 0 constraint, the squashing of
scores outside [0, 1], and the saved dict (numpy only, checked on load)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import minimize

from workbench.calibration import BetaCalibrator, calibrator_from_dict
from workbench.calibration.platt import platt_targets
from workbench.core.errors import DataError


def _beta_data(n: int, a: float, b: float, c: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Scores uniform in (0, 1), labels drawn from the beta map σ(a ln s − b ln(1 − s) + c)."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(0.02, 0.98, size=n)
    p = 1.0 / (1.0 + np.exp(-(a * np.log(s) - b * np.log(1.0 - s) + c)))
    return s, (rng.random(n) < p).astype(float)


def _hand_fit(s: np.ndarray, t: np.ndarray, fix_a_at_zero: bool = False) -> np.ndarray:
    """The maximum-likelihood (a, b, c) by a general-purpose optimiser on the loss written out here: the mean of
    log(1 + e^f) − t f with f = a ln s − b ln(1 − s) + c (a held at 0 when asked)."""

    def loss(theta: np.ndarray) -> float:
        a, b, c = (0.0, *theta) if fix_a_at_zero else theta
        f = a * np.log(s) - b * np.log(1.0 - s) + c
        return float(np.mean(np.logaddexp(0.0, f) - t * f))

    start = np.zeros(2 if fix_a_at_zero else 3)
    theta = minimize(loss, start, method="BFGS", options={"gtol": 1e-10}).x
    return np.r_[0.0, theta] if fix_a_at_zero else theta


def test_the_fit_matches_the_likelihood_maximised_by_hand():
    s, y = _beta_data(400, a=1.5, b=0.7, c=0.4)
    for smoothing in (False, True):
        cal = BetaCalibrator(prior_smoothing=smoothing).fit(s, y)
        assert cal.squash_ is None  # scores in [0, 1]: calibrated as they are
        expected = _hand_fit(s, platt_targets(y, smoothing))
        np.testing.assert_allclose([cal.a_, cal.b_, cal.c_], expected, atol=1e-5)
        p = 1.0 / (1.0 + np.exp(-(expected[0] * np.log(s) - expected[1] * np.log(1.0 - s) + expected[2])))
        np.testing.assert_allclose(cal.predict(s), p, atol=1e-6)


def test_a_large_sample_recovers_the_map_it_was_drawn_from():
    s, y = _beta_data(20_000, a=2.0, b=0.5, c=0.3, seed=1)
    cal = BetaCalibrator(prior_smoothing=False).fit(s, y)
    assert cal.a_ == pytest.approx(2.0, abs=0.15) and cal.b_ == pytest.approx(0.5, abs=0.1)
    assert cal.c_ == pytest.approx(0.3, abs=0.15)


def test_a_negative_coefficient_is_dropped_and_the_rest_refitted():
    # drawn with a < 0 (P(correct) falls where s is small... and rises again): the unconstrained fit has a < 0, which
    # is a non-monotone map; the constrained fit is the one-input model with a = 0, maximised by hand the same way
    s, y = _beta_data(3000, a=-1.0, b=2.0, c=0.0, seed=2)
    free = _hand_fit(s, y)
    assert free[0] < 0.0
    cal = BetaCalibrator(prior_smoothing=False).fit(s, y)
    assert cal.a_ == 0.0 and cal.b_ > 0.0
    np.testing.assert_allclose([cal.a_, cal.b_, cal.c_], _hand_fit(s, y, fix_a_at_zero=True), atol=1e-5)
    grid = np.linspace(0.0, 1.0, 501)
    assert np.all(np.diff(cal.predict(grid)) >= 0.0) and cal.strictly_increasing


def test_an_anti_correlated_score_gets_the_constant_map():
    s, y = _beta_data(500, a=-1.0, b=-1.0, c=0.0, seed=3)
    cal = BetaCalibrator(prior_smoothing=False).fit(s, y)
    assert cal.a_ == 0.0 and cal.b_ == 0.0 and not cal.strictly_increasing
    np.testing.assert_allclose(cal.predict([0.1, 0.5, 0.9]), y.mean(), atol=1e-9)


def test_scores_outside_unit_interval_are_squashed_by_their_mean_and_scale_first():
    rng = np.random.default_rng(4)
    s = rng.normal(loc=-3.0, scale=2.0, size=300)  # e.g. an oriented entropy: all negative
    y = (rng.random(300) < 1.0 / (1.0 + np.exp(-(s + 3.0)))).astype(float)
    cal = BetaCalibrator().fit(s, y)
    assert cal.squash_ == pytest.approx((s.mean(), s.std()))
    squashed = 1.0 / (1.0 + np.exp(-(s - s.mean()) / s.std()))
    expected = _hand_fit(squashed, platt_targets(y, True))
    np.testing.assert_allclose([cal.a_, cal.b_, cal.c_], expected, atol=1e-5)
    grid = np.linspace(-40.0, 40.0, 2001)  # far beyond the fit range: finite, monotone
    p = cal.predict(grid)
    assert np.all(np.isfinite(p)) and np.all(np.diff(p) >= 0.0) and 0.0 <= p.min() < p.max() <= 1.0


def test_separable_scores_keep_finite_coefficients_and_nan_passes_through():
    cal = BetaCalibrator().fit([0.1, 0.2, 0.3, 0.7, 0.8, 0.9], [0, 0, 0, 1, 1, 1])
    assert all(np.isfinite([cal.a_, cal.b_, cal.c_])) and cal.strictly_increasing
    out = cal.predict([np.nan, 0.0, 1.0, -0.5, 1.5])
    assert np.isnan(out[0]) and out[1] == out[3] and out[2] == out[4]  # clipped ends, the same value beyond them


def test_the_saved_dict_round_trips_and_is_checked_on_load():
    s, y = _beta_data(200, a=1.0, b=1.0, c=0.0)
    cal = BetaCalibrator().fit(s * 10, y)  # squashed
    d = json.loads(json.dumps(cal.to_dict()))
    assert set(d) == {"kind", "version", "a", "b", "c", "squash"} and d["kind"] == "beta"
    again = calibrator_from_dict(d)
    grid = np.linspace(-5.0, 15.0, 301)
    np.testing.assert_array_equal(again.predict(grid), cal.predict(grid))
    for tamper, message in [
        ({"a": -0.5}, "non-monotone"),
        ({"c": float("nan")}, "finite number"),
        ({"squash": [0.0]}, r"null or \[mean, scale\]"),
        ({"squash": [0.0, 0.0]}, "scale must be positive"),
        ({"squash": "x"}, r"null or \[mean, scale\]"),
        ({"extra": 1}, "unknown key"),
    ]:
        with pytest.raises(DataError, match=message) as info:
            calibrator_from_dict({**d, **tamper})
        assert "\n" not in str(info.value)
