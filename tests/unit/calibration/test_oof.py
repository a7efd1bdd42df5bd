"""Out-of-fold calibration: stratified deterministic folds, honest predictions, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.calibration import KINDS, fit_calibrator, out_of_fold_predict
from workbench.calibration.oof import stratified_folds
from workbench.core.errors import ConfigError, DataError


def _data(n: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-2 * s))).astype(float)
    return s, y


def test_stratified_folds_balance_classes():
    y = np.r_[np.zeros(13), np.ones(7)]
    folds = stratified_folds(y, 5, seed=0)
    sizes = np.bincount(folds, minlength=5)
    assert sizes.max() - sizes.min() <= 1
    pos_per_fold = np.bincount(folds[y > 0.5], minlength=5)
    assert pos_per_fold.max() - pos_per_fold.min() <= 1
    np.testing.assert_array_equal(folds, stratified_folds(y, 5, seed=0))
    assert not np.array_equal(folds, stratified_folds(y, 5, seed=1))


@pytest.mark.parametrize("kind", KINDS)
def test_oof_differs_from_in_sample_and_is_deterministic(kind):
    s, y = _data()
    oof = out_of_fold_predict(kind, s, y, n_folds=5, seed=0)
    in_sample = fit_calibrator(kind, s, y).predict(s)
    assert oof.shape == s.shape
    assert np.all((oof >= 0) & (oof <= 1))
    assert not np.allclose(oof, in_sample)
    np.testing.assert_array_equal(oof, out_of_fold_predict(kind, s, y, n_folds=5, seed=0))
    assert not np.array_equal(oof, out_of_fold_predict(kind, s, y, n_folds=5, seed=1))


def test_oof_prediction_comes_from_the_other_folds():
    s, y = _data(50, seed=2)
    folds = stratified_folds(y, 5, seed=3)
    oof = out_of_fold_predict("platt", s, y, n_folds=5, seed=3)
    test = folds == 0
    expected = fit_calibrator("platt", s[~test], y[~test]).predict(s[test])
    np.testing.assert_allclose(oof[test], expected)


def test_oof_errors():
    s, y = _data(40)
    s_nan = s.copy()
    s_nan[[0, 5, 9]] = np.nan
    with pytest.raises(DataError, match="3 of 40 scores are NaN"):
        out_of_fold_predict("isotonic", s_nan, y)
    with pytest.raises(DataError, match="NaN"):
        fit_calibrator("isotonic", s_nan, y)
    with pytest.raises(DataError, match="label column has one class only"):
        out_of_fold_predict("isotonic", s, np.ones_like(s))
    with pytest.raises(DataError, match="label column has one class only"):
        fit_calibrator("platt", s, np.zeros_like(s))
    with pytest.raises(DataError, match="at least 2 examples of each class"):
        out_of_fold_predict("isotonic", s, np.r_[1.0, np.zeros(39)])
    with pytest.raises(ConfigError, match="n_folds"):
        out_of_fold_predict("isotonic", s, y, n_folds=1)
    with pytest.raises(ConfigError, match="unknown calibrator kind"):
        out_of_fold_predict("spline", s, y)
