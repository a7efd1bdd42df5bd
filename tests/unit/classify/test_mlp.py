"""The Lightning MLP: it learns, is deterministic for a seed, round-trips through JSON, stops early."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.unit.classify.helpers import FEATURE_NAMES, SMALL_MLP
from workbench.classify.mlp import MLPConfig, MLPModel, fit_mlp
from workbench.core.errors import ConfigError, DataError
from workbench.methods.learned import load_learned, save_learned
from workbench.metrics.ranking import auroc


def test_trains_on_the_synthetic_rule(data, mlp_model):
    losses = mlp_model.val_losses
    assert min(losses) < losses[0]
    assert mlp_model.val_losses[mlp_model.best_epoch] == min(losses)
    assert auroc(mlp_model.predict_proba(data.X_val), data.y_val) > 0.7
    assert mlp_model.feature_names == FEATURE_NAMES


def test_deterministic_for_a_seed(data, mlp_model):
    again = fit_mlp(data.X_train, data.y_train, data.X_val, data.y_val, SMALL_MLP, 0, feature_names=FEATURE_NAMES)
    assert np.array_equal(again.predict_proba(data.X_val), mlp_model.predict_proba(data.X_val))
    assert again.val_losses == mlp_model.val_losses
    other = fit_mlp(data.X_train, data.y_train, data.X_val, data.y_val, SMALL_MLP, 1, feature_names=FEATURE_NAMES)
    assert not np.array_equal(other.predict_proba(data.X_val), mlp_model.predict_proba(data.X_val))


def test_save_load_round_trip(tmp_path, data, mlp_model):
    written = save_learned(mlp_model, tmp_path / "mlp.json")
    assert [p.name for p in written] == ["mlp.json"]  # small weights: JSON only, no tensor file
    loaded = load_learned(tmp_path / "mlp.json", expect={"mlp"})
    assert loaded.config == mlp_model.config
    assert loaded.feature_names == FEATURE_NAMES
    assert loaded.val_losses == mlp_model.val_losses
    assert np.array_equal(loaded.predict_proba(data.X_val), mlp_model.predict_proba(data.X_val))
    save_learned(loaded, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == (tmp_path / "mlp.json").read_bytes()  # byte-identical


def test_numpy_forward_matches_the_torch_module(data, mlp_model):
    import torch

    with torch.no_grad():
        torch_p = mlp_model.scoring_module()(torch.from_numpy(data.X_val.astype(np.float32))).numpy()
    assert np.max(np.abs(mlp_model.predict_proba(data.X_val) - torch_p)) < 1e-6


def test_from_dict_refuses_malformed_descriptions(mlp_model):
    good = json.loads(json.dumps(mlp_model.to_dict()))
    with pytest.raises(DataError, match="kind"):
        MLPModel.from_dict({**good, "kind": "logistic"})
    with pytest.raises(DataError, match="version"):
        MLPModel.from_dict({**good, "version": 99})
    first = sorted(good["state"])[0]
    with pytest.raises(DataError, match="architecture"):
        MLPModel.from_dict({**good, "state": {**good["state"], first: [[1.0]]}})
    with pytest.raises(DataError, match="non-finite"):
        MLPModel.from_dict({**good, "mean": [float("nan")] * len(good["mean"])})
    with pytest.raises(DataError, match="missing"):
        MLPModel.from_dict({k: v for k, v in good.items() if k != "state"})


def test_early_stopping_stops_on_a_plateau(data):
    # A learning rate of 1e-9 leaves the validation loss flat, far below min_delta: after the first epoch sets the
    # best value, `patience` epochs without improvement follow and training stops.
    config = MLPConfig(hidden_sizes=(8,), learning_rate=1e-9, max_epochs=50, patience=3, min_delta=1e-3)
    model = fit_mlp(data.X_train, data.y_train, data.X_val, data.y_val, config, 0)
    assert model.epochs_trained < config.max_epochs
    assert model.epochs_trained <= config.patience + 1


@pytest.mark.parametrize(
    ("key", "value"),
    [("hidden_sizes", (0,)), ("dropout", 1.0), ("learning_rate", 0.0), ("max_epochs", 0), ("patience", 0)],
)
def test_bad_config_is_a_config_error(key, value):
    with pytest.raises(ConfigError, match=rf"mlp\.{key}"):
        MLPConfig(**{key: value})


def test_config_dict_round_trip():
    config = MLPConfig(hidden_sizes=[64, 32], dropout=0.1)
    assert config.hidden_sizes == (64, 32)
    assert MLPConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ConfigError, match="unknown"):
        MLPConfig.from_dict({"hidden": [3]})
