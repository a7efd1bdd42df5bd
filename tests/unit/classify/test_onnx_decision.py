"""The ONNX decision graph: fed what its metadata says (raw features), ONNX Runtime gives the numpy decision path's
P(correct) within 1e-5 — every calibrator kind, both classifier kinds, NaN / ±inf imputed inside — and the
classifier-only graph says it reads calibrated features."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime
import pytest

from tests.unit.classify.helpers import FEATURE_NAMES
from workbench.calibration.calibrator_set import CalibratorSet
from workbench.calibration.registry import calibrator_from_dict, make_calibrator
from workbench.classify.logistic import fit_logistic
from workbench.classify.onnx_check import graph_kind
from workbench.classify.onnx_decision import export_decision_onnx
from workbench.classify.onnx_export import OnnxClassifier, export_onnx
from workbench.classify.policy import DecisionPolicy
from workbench.core.errors import ConfigError

KINDS = ("isotonic", "centered_isotonic", "platt", "raw", "beta")


def _calibrators(data, kinds) -> CalibratorSet:
    fitted = {
        name: make_calibrator(kind).fit(data.X_train[:, j], data.y_train)
        for j, (name, kind) in enumerate(zip(FEATURE_NAMES, kinds, strict=True))
    }
    medians = {name: float(np.median(data.X_train[:, j])) for j, name in enumerate(FEATURE_NAMES)}
    ranges = {
        name: (float(data.X_train[:, j].min()), float(data.X_train[:, j].max()))
        for j, name in enumerate(FEATURE_NAMES[:3])
    }  # the last feature has no range: ±inf falls back to its median
    return CalibratorSet(FEATURE_NAMES, fitted, medians, ranges)


def _probes(data) -> np.ndarray:
    """Raw rows across and beyond the fit range, the training rows themselves (isotonic breakpoints), and rows with
    NaN, +inf and −inf in every column."""
    rng = np.random.default_rng(3)
    lo, hi = data.X_train.min(axis=0), data.X_train.max(axis=0)
    rows = [rng.uniform(lo - (hi - lo), hi + (hi - lo), size=(300, lo.size)), data.X_train, data.X_val]
    special = np.tile(data.X_val[:3], (3, 1))
    for k, value in enumerate((np.nan, np.inf, -np.inf)):
        special[3 * k : 3 * k + 3, k % lo.size] = value
        special[3 * k + 2, :] = value
    return np.vstack([*rows, special])


def _graph(tmp_path, data, kinds, model, tau=0.5):
    calibrators = _calibrators(data, kinds)
    classifier = export_onnx(model, tmp_path / "classifier.onnx", FEATURE_NAMES)
    return calibrators, export_decision_onnx(calibrators, classifier, tmp_path / "decision.onnx", tau)


@pytest.mark.parametrize(
    "kinds",
    [tuple([k] * 4) for k in KINDS]
    + [KINDS[:4], ("platt", "raw", "centered_isotonic", "isotonic"), ("isotonic", "platt", "raw", "beta")],
    ids=lambda k: "-".join(k),
)
@pytest.mark.parametrize("kind", ["logistic", "mlp"])
def test_the_graph_fed_raw_features_gives_the_numpy_decision(tmp_path, data, kinds, kind, mlp_model):
    calibrators = _calibrators(data, kinds)
    u_train = calibrators.transform(data.X_train)
    model = fit_logistic(u_train, data.y_train, feature_names=FEATURE_NAMES) if kind == "logistic" else mlp_model
    classifier = export_onnx(model, tmp_path / "classifier.onnx", FEATURE_NAMES)
    tau = 0.55
    path = export_decision_onnx(calibrators, classifier, tmp_path / "decision.onnx", tau)

    proto = onnx.load(str(path))  # what an independent client reads: the metadata names the input and its meaning
    meta = {p.key: p.value for p in proto.metadata_props}
    assert [i.name for i in proto.graph.input] == ["raw_features"] and meta["input"] == "raw"
    assert "raw oriented features" in meta["contract"] and json.loads(meta["feature_names"]) == list(FEATURE_NAMES)
    assert json.loads(meta["calibrators"]) == dict(zip(FEATURE_NAMES, kinds, strict=True)) and float(meta["tau"]) == tau

    raw = _probes(data)
    session = onnxruntime.InferenceSession(path.read_bytes(), providers=["CPUExecutionProvider"])
    p_onnx, retrieve = session.run(["p_correct", "retrieve"], {"raw_features": raw})  # plain onnxruntime, no workbench
    policy = DecisionPolicy(calibrators, model, tau)
    p_numpy = policy.p_correct(list(raw))
    assert np.max(np.abs(p_onnx - p_numpy)) <= 1e-5
    clear = np.abs(p_numpy - tau) > 1e-5
    assert np.array_equal(retrieve[clear], (p_numpy < tau)[clear])
    assert np.array_equal(retrieve, p_onnx.astype(np.float64) < tau)

    runtime = DecisionPolicy(calibrators, OnnxClassifier(path), tau)  # the runtime's ONNX path: raw in
    assert runtime.classifier_reads_raw and np.max(np.abs(runtime.p_correct(list(raw)) - p_numpy)) <= 1e-5
    for row in raw[-9:]:
        a, b = runtime.decide(list(row)), policy.decide(list(row))
        assert abs(a.p_correct - b.p_correct) <= 1e-5 and a.imputed == b.imputed
        assert np.array_equal(a.calibrated, b.calibrated)


def test_the_classifier_graph_says_it_reads_calibrated_features(tmp_path, data):
    calibrators = _calibrators(data, KINDS[:4])
    u = calibrators.transform(data.X_val)
    model = fit_logistic(calibrators.transform(data.X_train), data.y_train, feature_names=FEATURE_NAMES)
    path = export_onnx(model, tmp_path / "c.onnx", FEATURE_NAMES)
    proto = onnx.load(str(path))
    meta = {p.key: p.value for p in proto.metadata_props}
    assert [i.name for i in proto.graph.input] == ["calibrated_features"] and meta["input"] == "calibrated"
    assert "calibrated features" in meta["contract"] and "not the raw features" in meta["contract"]
    assert np.max(np.abs(OnnxClassifier(path).predict_proba(u) - model.predict_proba(u))) <= 1e-5


def test_isotonic_steps_a_few_ulps_wide_and_exact_breakpoints(tmp_path, data):
    """Breakpoints 1e-15 apart (a steep ramp) and probes exactly on them: float64 inside the graph keeps them."""
    x = [0.0, 0.5, 0.5 + 1e-15, 0.7, 1.0]
    steep = calibrator_from_dict({"kind": "isotonic", "version": 1, "x": x, "y": [0.0, 0.2, 0.8, 0.85, 1.0]})
    calibrators = CalibratorSet(FEATURE_NAMES, dict.fromkeys(FEATURE_NAMES, steep), {}, {})
    model = fit_logistic(calibrators.transform(data.X_train / 20 + 0.5), data.y_train, feature_names=FEATURE_NAMES)
    classifier = export_onnx(model, tmp_path / "c.onnx", FEATURE_NAMES)
    path = export_decision_onnx(calibrators, classifier, tmp_path / "d.onnx")
    column = np.array([*x, 0.25, 0.5 + 5e-16, 0.85, -3.0, 4.0, np.nextafter(0.5, 0), np.nextafter(0.7, 1)])
    raw = np.tile(column[:, None], (1, 4))
    u_onnx = onnxruntime.InferenceSession(path.read_bytes(), providers=["CPUExecutionProvider"])
    assert {o.name for o in u_onnx.get_outputs()} == {"p_correct"}  # no τ given: no decision output
    p = OnnxClassifier(path).predict_proba(raw)
    assert np.max(np.abs(p - DecisionPolicy(calibrators, model, 0.5).p_correct(list(raw)))) <= 1e-5


def test_a_calibrator_without_an_onnx_form_is_refused(tmp_path, data):
    class Odd:
        kind = "odd"

        def predict(self, s):
            return np.asarray(s)

    calibrators = _calibrators(data, KINDS[:4])
    calibrators.calibrators["conf"] = Odd()
    model = fit_logistic(data.X_train, data.y_train, feature_names=FEATURE_NAMES)
    classifier = export_onnx(model, tmp_path / "c.onnx", FEATURE_NAMES)
    with pytest.raises(ConfigError, match="no ONNX form"):
        export_decision_onnx(calibrators, classifier, tmp_path / "d.onnx")


def test_beta_calibration_in_the_graph_on_unit_and_squashed_features_and_at_the_clipped_ends(tmp_path, data):
    """``ptrue`` lies in [0, 1] (beta calibration on the score itself, clipped at the ends), the others do not
    (squashed first): probes at 0, 1, beyond them and at ±1e3 standard deviations give the numpy probabilities."""
    calibrators = _calibrators(data, ("beta",) * 4)
    squash = {name: calibrators.calibrators[name].squash_ for name in FEATURE_NAMES}
    assert squash["ptrue"] is None and squash["entropy"] is not None and squash["noise"] is not None
    raw = np.vstack([_probes(data), np.tile(np.array([[0.0], [1.0], [-1e3], [1e3], [1e-13], [1 - 1e-13]]), (1, 4))])
    u_numpy = calibrators.transform(np.vstack([calibrators.clean(list(row))[0] for row in raw]))
    model = fit_logistic(calibrators.transform(data.X_train), data.y_train, feature_names=FEATURE_NAMES)
    path = export_decision_onnx(
        calibrators, export_onnx(model, tmp_path / "c.onnx", FEATURE_NAMES), tmp_path / "d.onnx"
    )
    p_onnx = OnnxClassifier(path).predict_proba(raw)
    assert np.max(np.abs(p_onnx - model.predict_proba(u_numpy))) <= 1e-5
    assert graph_kind(onnx.load(str(path))) == "logistic"  # the calibrators add no hidden layer's Relu
