"""ONNX export: the classifier graph (standardisation inside; it reads calibrated features) matches the numpy /
torch model to 1e-5 for any batch size."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.unit.classify.helpers import FEATURE_NAMES
from workbench.classify.logistic import fit_logistic
from workbench.classify.onnx_export import export_onnx, onnx_feature_names, run_onnx
from workbench.core.errors import DataError


@pytest.fixture(scope="module")
def logistic_model(data):
    return fit_logistic(data.X_train, data.y_train, feature_names=FEATURE_NAMES)


def _probe_batches(data):
    rng = np.random.default_rng(7)
    lo, hi = data.X_train.min(axis=0), data.X_train.max(axis=0)
    widen = hi - lo
    return [rng.uniform(lo - widen, hi + widen, size=(n, lo.size)) for n in (1, 37, 200)] + [data.X_val]


@pytest.mark.parametrize("kind", ["logistic", "mlp"])
def test_onnx_matches_the_model(tmp_path, data, kind, logistic_model, mlp_model):
    model = logistic_model if kind == "logistic" else mlp_model
    path = export_onnx(model, tmp_path / f"{kind}.onnx", FEATURE_NAMES)
    proto = onnx.load(str(path))
    assert [i.name for i in proto.graph.input] == ["calibrated_features"]
    assert [o.name for o in proto.graph.output] == ["p_correct"]
    assert onnx_feature_names(path) == FEATURE_NAMES
    for X in _probe_batches(data):
        out = run_onnx(path, X)
        assert out.shape == (X.shape[0],)
        assert np.max(np.abs(out - model.predict_proba(X))) <= 1e-5


def test_export_refuses_other_feature_names(tmp_path, logistic_model):
    with pytest.raises(DataError, match="differ"):
        export_onnx(logistic_model, tmp_path / "m.onnx", ["a", "b", "c", "d"])
    assert not (tmp_path / "m.onnx").exists()


def test_run_onnx_refuses_the_wrong_width(tmp_path, data, logistic_model):
    path = export_onnx(logistic_model, tmp_path / "m.onnx")
    with pytest.raises(DataError, match="expected 4 features"):
        run_onnx(path, data.X_val[:, :3])
