"""Bad inputs are one-line DataErrors: non-finite features, one-class labels, the wrong feature count."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.classify.helpers import SMALL_MLP
from workbench.classify.logistic import fit_logistic
from workbench.classify.mlp import fit_mlp
from workbench.classify.select import train_classifiers
from workbench.core.errors import DataError


def _with_nan(X):
    X = X.copy()
    X[3, 1] = np.nan
    return X


def test_nan_features_are_refused(data, mlp_model):
    with pytest.raises(DataError, match="NaN"):
        fit_logistic(_with_nan(data.X_train), data.y_train)
    with pytest.raises(DataError, match="X_train"):
        fit_mlp(_with_nan(data.X_train), data.y_train, data.X_val, data.y_val, SMALL_MLP, 0)
    with pytest.raises(DataError, match="X_val"):
        fit_mlp(data.X_train, data.y_train, _with_nan(data.X_val), data.y_val, SMALL_MLP, 0)
    model = fit_logistic(data.X_train, data.y_train)
    for m in (model, mlp_model):
        with pytest.raises(DataError, match="NaN"):
            m.predict_proba(_with_nan(data.X_val))


def test_one_class_labels_are_refused(data):
    ones = np.ones_like(data.y_train)
    with pytest.raises(DataError, match="one class only"):
        fit_logistic(data.X_train, ones)
    with pytest.raises(DataError, match="one class only"):
        fit_mlp(data.X_train, ones, data.X_val, data.y_val, SMALL_MLP, 0)
    with pytest.raises(DataError, match="one class only"):
        train_classifiers(data.X_train, data.y_train, data.X_val, np.zeros_like(data.y_val), kinds=("logistic",))


def test_feature_count_mismatch_at_predict(data, mlp_model):
    model = fit_logistic(data.X_train, data.y_train)
    for m in (model, mlp_model):
        with pytest.raises(DataError, match="expected 4 features per row, got 5"):
            m.predict_proba(np.hstack([data.X_val, data.X_val[:, :1]]))


def test_other_malformed_inputs(data):
    with pytest.raises(DataError, match="2-D"):
        fit_logistic(data.X_train[:, 0], data.y_train)
    with pytest.raises(DataError, match="labels for"):
        fit_logistic(data.X_train, data.y_train[:-1])
    with pytest.raises(DataError, match="0 \\(incorrect"):
        fit_logistic(data.X_train, data.y_train * 2)
    with pytest.raises(DataError, match="feature names"):
        fit_logistic(data.X_train, data.y_train, feature_names=["a", "b"])
