"""``calibrate.nan_policy: drop`` fits without the questions that hold a NaN or ±inf feature, but inference cannot drop
a question: it imputes with the stored medians and ranges. Pinned here, and said where the setting is documented."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from workbench.calibration.calibrator_set import CalibratorSet
from workbench.calibration.registry import calibrator_from_dict
from workbench.classify.policy import DecisionPolicy
from workbench.stages.calibrate.run import apply_nan_policy

DOCS = Path(__file__).resolve().parents[3] / "docs" / "methods" / "d2rag.md"


class _Classifier:
    feature_names = ("dtr_nll",)

    def predict_proba(self, X):
        return np.asarray(X, dtype=float)[:, 0]


def test_drop_fits_without_the_row_and_inference_still_imputes_it():
    calib = np.array([[-0.5], [-1.0], [-np.inf], [-2.0]])
    test = np.array([[np.nan], [-1.5]])
    out, _, counts = apply_nan_policy({"calib": calib, "test": test}, "calib", "drop", ["dtr_nll"])
    assert out["calib"].shape == (3, 1) and np.isfinite(out["calib"]).all()  # the fit never sees the -inf row
    assert counts["dropped_rows"] == {"calib": 1, "test": 1}
    # what inference imputes with is stored whatever the policy
    assert counts["medians"] == {"dtr_nll": -1.0} and counts["ranges"] == {"dtr_nll": (-2.0, -0.5)}
    calibrator = calibrator_from_dict({"kind": "isotonic", "version": 1, "x": [-2.0, -0.5], "y": [0.0, 1.0]})
    calibrators = CalibratorSet(("dtr_nll",), {"dtr_nll": calibrator}, counts["medians"], counts["ranges"])
    policy = DecisionPolicy(calibrators, _Classifier(), 0.5)
    for raw, stand_in in ((-math.inf, -2.0), (math.nan, -1.0)):
        decision = policy.decide({"dtr_nll": raw})  # a row the drop fit never saw: imputed, not dropped
        assert decision.imputed == ["dtr_nll"] and decision.raw[0] == stand_in


def test_the_docs_and_the_recipe_key_say_inference_imputes_under_drop():
    from dataclasses import fields

    from workbench.recipe import CalibrateSection

    text = " ".join(DOCS.read_text().split())
    assert "Under `calibrate.nan_policy: drop`" in text and "an imputed input the fit never saw" in text
    meaning = {f.name: f for f in fields(CalibrateSection)}["nan_policy"].metadata["doc"]
    assert "still impute" in meaning and "never saw an imputed row" in meaning
