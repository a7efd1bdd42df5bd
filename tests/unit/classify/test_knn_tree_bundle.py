"""A bundle whose decision classifier is a k-NN or a tree: the runtime loads it (the k-NN's points from the
safetensors file beside ``classifier.json``), its numpy and ONNX paths decide the same way, and a bundle whose
manifest names another kind than its files hold is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.unit.bundle.test_bundle_attacks import _reseal
from tests.unit.bundle.test_bundle_beta_calibrators import FIXTURE, _raw
from workbench.classify.knn import KNNConfig, fit_knn
from workbench.classify.onnx_decision import export_decision_onnx
from workbench.classify.onnx_export import export_onnx
from workbench.classify.tree import TreeConfig, fit_tree
from workbench.core.errors import DataError
from workbench.methods.learned import load_learned, save_learned
from workbench.runtime import load_bundle


def _bundle(tmp_path: Path, kind: str, declared: str | None = None) -> Path:
    """The tiny fixture with its classifier replaced by a ``kind`` fitted on its calibrators' outputs."""
    root = Path(shutil.copytree(FIXTURE / "1.0.0", tmp_path / kind / "1.0.0"))
    manifest = json.loads((root / "manifest.json").read_text())
    calibrators = load_learned(root / "learned" / "calibrators.json", expect={"calibrator_set"})
    raw, y = _raw(200, 0)
    u = calibrators.transform(raw)
    names = calibrators.features
    if kind == "knn":
        model = fit_knn(u, y, KNNConfig(9), feature_names=names)
    else:
        model = fit_tree(u, y, TreeConfig(max_depth=4, min_samples_leaf=5), feature_names=names)
    for written in save_learned(model, root / "learned" / "classifier.json"):
        manifest["files"].setdefault(str(written.relative_to(root)), {})
    graph = export_onnx(model, tmp_path / f"{kind}.onnx", names)
    export_decision_onnx(calibrators, graph, root / "learned" / "classifier.onnx", manifest["decision"]["tau"])
    manifest["decision"]["classifier"] = declared or kind
    _reseal(root, manifest)
    return root


@pytest.mark.parametrize("kind", ["knn", "tree"])
def test_a_bundle_with_a_knn_or_tree_decides_the_same_in_numpy_and_onnx(tmp_path, kind):
    root = _bundle(tmp_path, kind)
    numpy_rt, onnx_rt = load_bundle(root), load_bundle(root, {"classifier": "onnx"})
    assert numpy_rt.policy.classifier.kind == kind
    assert onnx_rt.policy.classifier.classifier_kind == kind
    raw, _ = _raw(60, 1)
    rows = [dict(zip(numpy_rt.policy.calibrators.features, r, strict=True)) for r in raw]
    p_numpy, p_onnx = numpy_rt.policy.p_correct(rows), onnx_rt.policy.p_correct(rows)
    assert np.max(np.abs(p_numpy - p_onnx)) <= 1e-6
    tau = numpy_rt.policy.tau
    assert ((p_numpy < tau) == (p_onnx < tau)).all()
    assert 0 < (p_numpy < tau).sum() < len(rows)  # both decisions exercised


def test_a_bundle_naming_another_kind_than_its_files_is_refused(tmp_path):
    root = _bundle(tmp_path, "tree", declared="knn")
    with pytest.raises(DataError, match=r"decision\.classifier' is knn"):
        load_bundle(root)
