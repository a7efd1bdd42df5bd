"""A bundle whose ``learned/classifier.onnx`` is the decision graph (raw features in, calibrators inside): it loads,
ONNX Runtime alone gives the runtime's P(correct) and decision from the raw features, and a graph built with other
calibrators is refused at load. The committed fixture (a classifier-only graph, input ``features``) loads as before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from tests.unit.bundle.test_bundle_attacks import _reseal
from workbench.calibration.calibrator_set import CalibratorSet
from workbench.calibration.platt import PlattCalibrator
from workbench.classify.onnx_decision import export_decision_onnx
from workbench.classify.onnx_export import OnnxClassifier
from workbench.core.errors import DataError
from workbench.runtime import load_bundle

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "bundles" / "tiny"


@pytest.fixture
def bundle(tmp_path) -> Path:
    """The fixture bundle with its classifier graph replaced by the decision graph, as export now writes it."""
    root = Path(shutil.copytree(FIXTURE / "1.0.0", tmp_path / "tiny" / "1.0.0"))
    manifest = json.loads((root / "manifest.json").read_text())
    calibrators = CalibratorSet.from_dict(json.loads((root / "learned" / "calibrators.json").read_text()))
    graph = root / "learned" / "classifier.onnx"
    export_decision_onnx(calibrators, graph.read_bytes(), graph, manifest["decision"]["tau"])
    _reseal(root, manifest)
    return root


def test_onnx_runtime_alone_gives_the_bundles_decision_from_raw_features(bundle):
    assert OnnxClassifier(bundle / "learned" / "classifier.onnx").input == "raw"
    numpy_rt, onnx_rt = load_bundle(bundle), load_bundle(bundle, {"classifier": "onnx"})
    assert onnx_rt.policy.classifier_reads_raw and not numpy_rt.policy.classifier_reads_raw
    features = numpy_rt.policy.features
    rng = np.random.default_rng(0)
    raw = rng.normal(scale=3.0, size=(64, len(features)))
    raw[:3, 0], raw[3:6, -1] = np.nan, np.inf
    rows = [dict(zip(features, r, strict=True)) for r in raw]
    p_numpy = numpy_rt.policy.p_correct(rows)
    assert np.max(np.abs(onnx_rt.policy.p_correct(rows) - p_numpy)) <= 1e-5
    session = onnxruntime.InferenceSession((bundle / "learned" / "classifier.onnx").read_bytes())
    p, retrieve = session.run(["p_correct", "retrieve"], {"raw_features": raw})  # no workbench code
    assert np.max(np.abs(p - p_numpy)) <= 1e-5
    tau = numpy_rt.policy.tau
    clear = np.abs(p_numpy - tau) > 1e-5
    assert np.array_equal(retrieve[clear], np.array([numpy_rt.decide(r).retrieve for r in rows])[clear])


def test_a_decision_graph_with_other_calibrators_is_refused(bundle):
    manifest = json.loads((bundle / "manifest.json").read_text())
    features = tuple(manifest["decision"]["features"])
    other = CalibratorSet(features, {f: _platt(4.0, -1.0) for f in features})
    graph = bundle / "learned" / "classifier.onnx"
    legacy = (FIXTURE / "1.0.0" / "learned" / "classifier.onnx").read_bytes()
    export_decision_onnx(other, legacy, graph, manifest["decision"]["tau"])
    _reseal(bundle, manifest)
    with pytest.raises(DataError, match="ONNX classifier and the numpy classifier disagree"):
        load_bundle(bundle)


def _platt(a: float, b: float) -> PlattCalibrator:
    out = PlattCalibrator()
    out.a_, out.b_ = a, b
    return out
