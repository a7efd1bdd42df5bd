"""Platt scaling, the calibrator registry and the JSON round trip of every kind."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from workbench.calibration import (
    KINDS,
    BetaCalibrator,
    IsotonicCalibrator,
    PlattCalibrator,
    calibrator_from_dict,
    fit_calibrator,
    make_calibrator,
)
from workbench.core.errors import ConfigError, DataError


def _data(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(2 * s - 0.5)))).astype(float)
    return s, y


def test_platt_matches_unregularised_logistic_regression():
    s, y = _data()
    ours = PlattCalibrator(prior_smoothing=False).fit(s, y)
    ref = LogisticRegression(C=1e10, max_iter=10_000, tol=1e-12).fit(s[:, None], y)
    assert ours.a_ == pytest.approx(ref.coef_[0, 0], abs=1e-4)
    assert ours.b_ == pytest.approx(ref.intercept_[0], abs=1e-4)


def test_platt_on_separable_data_is_an_increasing_sigmoid():
    # scores 0..4 wrong, 6..10 right: perfectly separable; Platt's targets keep the slope finite
    s = np.r_[np.arange(5.0), np.arange(6.0, 11.0)]
    y = np.r_[np.zeros(5), np.ones(5)]
    cal = PlattCalibrator().fit(s, y)
    assert np.isfinite(cal.a_) and cal.a_ > 0
    p = cal.predict(np.linspace(-5, 15, 201))
    assert np.all(np.diff(p) > 0) and p.min() > 0 and p.max() < 1
    # symmetric data → the midpoint score 5 maps to 1/2
    assert cal.predict([5.0])[0] == pytest.approx(0.5, abs=1e-9)
    # optimality with Platt's targets t = 6/7 (positives, (5+1)/(5+2)) and 1/7 (negatives, 1/(5+2)):
    # Σ (p_i - t_i) = 0 and Σ (p_i - t_i)·s_i = 0
    resid = cal.predict(s) - np.where(y > 0, 6 / 7, 1 / 7)
    assert abs(resid.sum()) < 1e-8 and abs((resid * s).sum()) < 1e-8


def test_platt_hand_computed_constant_scores():
    # all scores equal → a = 0 and σ(b) = mean target; with smoothing N₊ = 1, N₋ = 3:
    # targets 2/3 (one positive) and 1/5 (three negatives) → mean = (2/3 + 3/5) / 4 = 19/60
    cal = PlattCalibrator().fit([1.0, 1.0, 1.0, 1.0], [1, 0, 0, 0])
    assert cal.a_ == pytest.approx(0.0, abs=1e-9)
    assert cal.predict([1.0])[0] == pytest.approx(19 / 60)


@pytest.mark.parametrize("kind", KINDS)
def test_json_round_trip_gives_identical_predictions(kind):
    s, y = _data()
    cal = fit_calibrator(kind, s, y)
    d = json.loads(json.dumps(cal.to_dict()))
    assert d["kind"] == kind and d["version"] == 1
    again = calibrator_from_dict(d)
    grid = np.linspace(-5, 5, 1001)
    np.testing.assert_array_equal(again.predict(grid), cal.predict(grid))
    assert again.to_dict() == cal.to_dict()


def test_make_calibrator_kinds_and_errors():
    assert isinstance(make_calibrator("isotonic"), IsotonicCalibrator)
    assert make_calibrator("centered_isotonic").centered is True
    assert make_calibrator("platt", prior_smoothing=False).prior_smoothing is False
    assert isinstance(make_calibrator("beta"), BetaCalibrator)
    assert make_calibrator("auto", kinds=("platt", "beta")).kinds == ("platt", "beta")
    with pytest.raises(ConfigError, match="unknown calibrator kind 'sigmoid'"):
        make_calibrator("sigmoid")
    with pytest.raises(ConfigError, match="bad option"):
        make_calibrator("platt", slope=2)
    with pytest.raises(ConfigError, match="centered"):
        make_calibrator("isotonic", centered=True)


def _isotonic_dict() -> dict:
    return IsotonicCalibrator().fit([1, 2, 3, 4, 5, 6], [0, 1, 0, 0, 1, 1]).to_dict()


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (lambda d: d.update(kind="sigmoid"), "unknown calibrator kind 'sigmoid'"),
        (lambda d: d.pop("kind"), "missing key 'kind'"),
        (lambda d: d.pop("y"), "missing key"),
        (lambda d: d.update(extra=1), "unknown key"),
        (lambda d: d.update(version=99), "unsupported format version"),
        (lambda d: d.update(y=list(reversed(d["y"]))), "non-monotone"),
        (lambda d: d.update(x=list(reversed(d["x"]))), "non-monotone"),
        (lambda d: d["y"].__setitem__(1, float("nan")), "finite number"),
        (lambda d: d["x"].__setitem__(0, "1"), "finite number"),
        (lambda d: d.update(y=d["y"][:-1]), "breakpoints"),
        (lambda d: d.update(y=[v * 2 for v in d["y"]]), r"\[0, 1\]"),
    ],
)
def test_tampered_isotonic_dict_raises_data_error(tamper, message):
    d = json.loads(json.dumps(_isotonic_dict()))
    tamper(d)
    with pytest.raises(DataError, match=message) as info:
        calibrator_from_dict(d)
    assert "\n" not in str(info.value)


def test_tampered_platt_dict_and_non_dict():
    d = PlattCalibrator().fit([0, 1, 2, 3], [0, 0, 1, 1]).to_dict()
    with pytest.raises(DataError, match="finite number"):
        calibrator_from_dict({**d, "a": float("nan")})
    with pytest.raises(DataError, match="missing key"):
        calibrator_from_dict({"kind": "platt", "version": 1, "a": 1.0})
    with pytest.raises(DataError, match="expected a dict"):
        calibrator_from_dict([1, 2])
