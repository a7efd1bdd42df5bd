"""A bundle whose decision calibrators are beta calibrators (one on a [0, 1] feature, two squashed): the runtime
loads them with numpy alone — no scikit-learn imported —, gives the P(correct) the beta map computed by hand gives,
the ONNX decision graph agrees, and the calibrators' choice records load with them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.unit.bundle.test_bundle_attacks import _reseal
from workbench.calibration import CalibratorChoice, choose_calibrator
from workbench.calibration.calibrator_set import CalibratorSet
from workbench.classify.onnx_decision import export_decision_onnx
from workbench.methods.learned import load_learned, save_learned
from workbench.runtime import load_bundle

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "bundles" / "tiny"


def _raw(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of (confidence in (0, 1), entropy ≤ 0, dtr_nll ≤ 0) whose correctness follows a latent score."""
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=n)
    raw = np.stack(
        [
            1.0 / (1.0 + np.exp(-latent + rng.normal(scale=0.7, size=n))),
            -np.abs(2.0 - latent + rng.normal(scale=0.7, size=n)),
            -np.abs(1.5 - latent + rng.normal(size=n)),
        ],
        axis=1,
    )
    return raw, (rng.random(n) < 1.0 / (1.0 + np.exp(-2.0 * latent))).astype(float)


def _by_hand(d: dict, s: np.ndarray) -> np.ndarray:
    """σ(a ln s' − b ln(1 − s') + c), s' the score or its logistic squashing, from the saved numbers alone."""
    if d["squash"] is not None:
        s = 1.0 / (1.0 + np.exp(-(s - d["squash"][0]) / d["squash"][1]))
    return 1.0 / (1.0 + np.exp(-(d["a"] * np.log(s) - d["b"] * np.log(1.0 - s) + d["c"])))


def _beta_bundle(tmp_path: Path) -> Path:
    root = Path(shutil.copytree(FIXTURE / "1.0.0", tmp_path / "tiny" / "1.0.0"))
    manifest = json.loads((root / "manifest.json").read_text())
    old = load_learned(root / "learned" / "calibrators.json", expect={"calibrator_set"})
    raw, y = _raw(200, 0)
    fitted = {
        name: choose_calibrator(raw[:, j], y, ("beta",) if j else ("platt", "beta"))[0]
        for j, name in enumerate(old.features)
    }
    calibrators = CalibratorSet(old.features, fitted, old.medians, old.ranges)
    save_learned(calibrators, root / "learned" / "calibrators.json")
    graph = root / "learned" / "classifier.onnx"
    export_decision_onnx(calibrators, graph.read_bytes(), graph, manifest["decision"]["tau"])
    _reseal(root, manifest)
    return root


def test_the_runtime_loads_beta_calibrators_and_decides_with_the_beta_map(tmp_path):
    root = _beta_bundle(tmp_path)
    saved = json.loads((root / "learned" / "calibrators.json").read_text())
    features = saved["features"]
    assert features == ["confidence", "entropy", "dtr_nll"]
    assert {saved["calibrators"][f]["kind"] for f in features} == {"beta"}
    assert saved["calibrators"]["confidence"]["squash"] is None and saved["calibrators"]["entropy"]["squash"]

    numpy_rt, onnx_rt = load_bundle(root), load_bundle(root, {"classifier": "onnx"})
    raw, _ = _raw(50, 1)
    rows = [dict(zip(features, r, strict=True)) for r in raw]
    by_hand = np.stack([_by_hand(saved["calibrators"][f], raw[:, j]) for j, f in enumerate(features)], axis=1)
    np.testing.assert_allclose(numpy_rt.policy.calibrators.transform(raw), by_hand, atol=1e-9)
    p_numpy = numpy_rt.policy.p_correct(rows)
    np.testing.assert_allclose(p_numpy, numpy_rt.policy.classifier.predict_proba(by_hand), atol=1e-9)
    assert np.max(np.abs(onnx_rt.policy.p_correct(rows) - p_numpy)) <= 1e-5

    choices = numpy_rt.policy.calibrators.choices()
    assert set(choices) == set(features) and CalibratorChoice.from_dict(choices["entropy"]).rule == "fixed"
    assert CalibratorChoice.from_dict(choices["confidence"]).chosen == "beta"


def test_loading_and_deciding_with_beta_calibrators_imports_no_scikit_learn(tmp_path):
    root = _beta_bundle(tmp_path)
    code = (
        "import sys\n"
        "from workbench.runtime import load_bundle\n"
        f"rt = load_bundle({str(root)!r})\n"
        "p = rt.policy.p_correct([{'confidence': 0.7, 'entropy': -1.0, 'dtr_nll': -0.5}])\n"
        "assert 0.0 < float(p[0]) < 1.0\n"
        "assert 'sklearn' not in sys.modules, 'sklearn imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
