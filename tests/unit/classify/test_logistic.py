"""The numpy logistic model: parity with scikit-learn, JSON round trip, recovery of the generating weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from tests.unit.classify.helpers import FEATURE_NAMES, TRUE_WEIGHTS
from workbench.classify.logistic import LogisticModel, fit_logistic
from workbench.core.errors import ConfigError, DataError


def test_the_newton_fit_reaches_sklearns_optimum(data):
    # same objective as scikit-learn's LogisticRegression(C); solved to a tight tolerance both agree to 1e-7
    model = fit_logistic(data.X_train, data.y_train, C=0.5, seed=3)
    scaler = StandardScaler().fit(data.X_train)
    reference = LogisticRegression(C=0.5, tol=1e-12, max_iter=10_000, random_state=3).fit(
        scaler.transform(data.X_train), data.y_train
    )
    np.testing.assert_allclose(model.mean, scaler.mean_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(model.scale, scaler.scale_, rtol=1e-12)
    for X in (data.X_train, data.X_val):
        expected = reference.predict_proba(scaler.transform(X))[:, 1]
        assert np.max(np.abs(model.predict_proba(X) - expected)) <= 1e-7


def test_to_dict_from_dict_round_trip_is_exact(data):
    model = fit_logistic(data.X_train, data.y_train, feature_names=FEATURE_NAMES)
    restored = LogisticModel.from_dict(json.loads(json.dumps(model.to_dict())))
    assert restored.feature_names == FEATURE_NAMES
    for key in ("mean", "scale", "coef"):
        assert np.array_equal(getattr(restored, key), getattr(model, key))
    assert restored.intercept == model.intercept
    assert np.array_equal(restored.predict_proba(data.X_val), model.predict_proba(data.X_val))


def test_recovers_the_sign_of_the_generating_weights(data):
    model = fit_logistic(data.X_train, data.y_train, feature_names=FEATURE_NAMES)
    w = model.weights()
    for name, true in zip(FEATURE_NAMES, TRUE_WEIGHTS, strict=True):
        if true != 0:
            assert np.sign(w[name]) == np.sign(true), name
    assert abs(w["noise"]) < min(abs(w["conf"]), abs(w["entropy"]), abs(w["ptrue"]))


def test_raw_unit_weights_reproduce_the_logit(data):
    model = fit_logistic(data.X_train, data.y_train, feature_names=FEATURE_NAMES)
    raw = model.weights(standardised=False)
    logit = data.X_val @ np.array([raw[n] for n in FEATURE_NAMES]) + raw["(intercept)"]
    np.testing.assert_allclose(logit, model.decision_function(data.X_val), rtol=1e-9, atol=1e-9)


def test_malformed_description_and_bad_C_are_refused(data):
    good = fit_logistic(data.X_train, data.y_train).to_dict()
    with pytest.raises(DataError, match="inconsistent sizes"):
        LogisticModel.from_dict({**good, "coef": good["coef"][:-1]})
    with pytest.raises(DataError, match="kind"):
        LogisticModel.from_dict({**good, "kind": "mlp"})
    with pytest.raises(ConfigError):
        fit_logistic(data.X_train, data.y_train, C=0.0)
