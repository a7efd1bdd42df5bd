"""DecisionPolicy: clean → calibrate → classify → τ, the one decision path of D²-RAG (stage and runtime)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.calibration import make_calibrator
from workbench.calibration.calibrator_set import INF_CLIP, CalibratorSet
from workbench.classify.logistic import LogisticModel
from workbench.classify.onnx_export import OnnxClassifier, export_onnx
from workbench.classify.policy import DecisionPolicy, check_tau
from workbench.classify.threshold import ABOVE_ONE
from workbench.core.errors import ConfigError, DataError

FEATURES = ("confidence", "entropy")


def _policy(tau: float = 0.5) -> DecisionPolicy:
    rng = np.random.default_rng(0)
    calibrators = {}
    for name in FEATURES:
        scores = rng.normal(size=80)
        calibrators[name] = make_calibrator("platt").fit(scores, (scores + rng.normal(size=80) > 0).astype(float))
    cal = CalibratorSet(FEATURES, calibrators, {"confidence": -0.5})
    model = LogisticModel(np.full(2, 0.5), np.full(2, 0.2), np.array([1.5, 0.7]), -0.3, FEATURES)
    return DecisionPolicy(cal, model, tau, "max_f1")


def test_decide_matches_the_parts_by_hand():
    policy = _policy()
    raw = {"confidence": 0.3, "entropy": -1.0}
    decision = policy.decide(raw)
    u = np.array([[policy.calibrators.calibrators[f].predict([raw[f]])[0] for f in FEATURES]])
    p = policy.classifier.predict_proba(u)[0]
    assert decision.p_correct == pytest.approx(p, abs=1e-15) and decision.retrieve == (p < 0.5)
    assert decision.imputed == [] and np.allclose(decision.calibrated, u[0])
    batch = policy.p_correct([raw, [0.3, -1.0]])
    assert batch[0] == pytest.approx(p) and batch[1] == pytest.approx(p)


def test_non_finite_values_use_the_median_or_the_clip_rule():
    cal = _policy().calibrators
    values, imputed = cal.clean({"confidence": math.nan, "entropy": -math.inf})
    assert values.tolist() == [-0.5, -INF_CLIP] and imputed == ["confidence", "entropy"]
    values, _ = cal.clean({"entropy": 1.0})  # a feature absent from the mapping is NaN
    assert values.tolist() == [-0.5, 1.0]


def test_infinite_values_take_the_end_of_the_fit_range_and_nan_the_median():
    policy = _policy()
    cal = CalibratorSet(
        FEATURES,
        dict(policy.calibrators.calibrators),
        {"confidence": -0.5, "entropy": 0.1},
        {"confidence": (-3.0, 2.0), "entropy": (-4.0, 1.5)},
    )
    values, imputed = cal.clean({"confidence": -math.inf, "entropy": math.inf})
    assert values.tolist() == [-3.0, 1.5] and imputed == ["confidence", "entropy"]
    values, _ = cal.clean({"confidence": math.nan, "entropy": 0.7})
    assert values.tolist() == [-0.5, 0.7]  # a missing value is still typical, not extreme
    assert CalibratorSet.from_dict(cal.to_dict()).clean([-math.inf, math.inf])[0].tolist() == [-3.0, 1.5]


def test_a_set_without_ranges_writes_no_ranges_key():
    # sets fitted before ranges existed imputed ±inf with the median; readers from then refuse unknown keys
    assert "ranges" not in _policy().calibrators.to_dict()


@pytest.mark.parametrize(
    "ranges, match",
    [
        ({"confidence": [1.0]}, "two finite"),
        ({"confidence": [0.0, math.inf]}, "two finite"),
        ({"confidence": [2.0, 1.0]}, "above max"),
        ([1, 2], "mapping"),
    ],
)
def test_malformed_ranges_are_refused(ranges, match):
    d = _policy().calibrators.to_dict()
    with pytest.raises(DataError, match=match):
        CalibratorSet.from_dict({**d, "ranges": ranges})


def test_tau_range_and_always_retrieve():
    assert check_tau(ABOVE_ONE) == ABOVE_ONE and _policy(ABOVE_ONE).always_retrieves
    assert _policy(ABOVE_ONE).decide({"confidence": 9.0, "entropy": 9.0}).retrieve  # p ≤ 1 < 1 + ε
    for bad in (-0.1, 1.01, math.nan, True, "0.5"):
        with pytest.raises(ConfigError, match="tau"):
            check_tau(bad)


def test_a_classifier_for_other_features_is_refused():
    policy = _policy()
    other = LogisticModel(np.zeros(2), np.ones(2), np.ones(2), 0.0, ("entropy", "confidence"))
    with pytest.raises(DataError, match="differ"):
        DecisionPolicy(policy.calibrators, other, 0.5)
    with pytest.raises(DataError, match="no calibrator"):
        CalibratorSet(("confidence", "lars"), dict(policy.calibrators.calibrators))


def test_onnx_runtime_path_gives_the_same_decisions(tmp_path):
    policy = _policy()
    path = export_onnx(policy.classifier, tmp_path / "c.onnx")
    onnx_policy = DecisionPolicy(policy.calibrators, OnnxClassifier(path), policy.tau)
    rng = np.random.default_rng(3)
    rows = [dict(zip(FEATURES, r, strict=True)) for r in rng.normal(size=(50, 2))]
    assert np.max(np.abs(policy.p_correct(rows) - onnx_policy.p_correct(rows))) < 1e-6
    (tmp_path / "bad.onnx").write_bytes(b"not a graph")
    with pytest.raises(DataError, match="ONNX"):
        OnnxClassifier(tmp_path / "bad.onnx")


def test_calibrator_set_round_trips_and_validates():
    cal = _policy().calibrators
    again = CalibratorSet.from_dict(cal.to_dict())
    assert again.to_dict() == cal.to_dict()
    with pytest.raises(DataError, match="unknown key"):
        CalibratorSet.from_dict({**cal.to_dict(), "extra": 1})
    with pytest.raises(DataError, match="no calibrator"):
        CalibratorSet.from_dict({**cal.to_dict(), "features": ["confidence", "lars"]})
