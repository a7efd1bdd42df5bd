"""Model selection: every kind over every seed, PRR per run, the best mean PRR wins, ties go to logistic."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.classify.helpers import FEATURE_NAMES, SMALL_MLP
from workbench.classify import select
from workbench.classify.logistic import LogisticModel
from workbench.classify.mlp import MLPModel
from workbench.classify.select import train_classifiers
from workbench.core.errors import ConfigError


def _train(data, **kwargs):
    kwargs.setdefault("seeds", (0, 1))
    kwargs.setdefault("mlp_config", SMALL_MLP)
    return train_classifiers(data.X_train, data.y_train, data.X_val, data.y_val, feature_names=FEATURE_NAMES, **kwargs)


@pytest.fixture(scope="module")
def selection(data):
    return _train(data)


def test_chooses_a_kind_and_reports_per_seed_prr(selection):
    result = selection
    assert result.kind in ("logistic", "mlp")
    assert [(r.kind, r.seed) for r in result.runs] == [("logistic", 0), ("logistic", 1), ("mlp", 0), ("mlp", 1)]
    for kind in ("logistic", "mlp"):
        prrs = result.prr_by_seed(kind)
        assert set(prrs) == {0, 1}
        assert all(0.0 < v <= 1.0 for v in prrs.values())  # the rule is learnable: better than random
        assert result.summary[kind].mean_prr == pytest.approx(np.mean(list(prrs.values())))
        assert result.summary[kind].std_prr == pytest.approx(np.std(list(prrs.values())))
        assert 0.7 < result.summary[kind].mean_auroc <= 1.0
    best_mean = max(s.mean_prr for s in result.summary.values())
    assert result.summary[result.kind].mean_prr == best_mean
    assert result.prr_by_seed(result.kind)[result.seed] == max(result.prr_by_seed(result.kind).values())
    assert isinstance(result.model, LogisticModel if result.kind == "logistic" else MLPModel)
    assert result.model.feature_names == FEATURE_NAMES
    assert set(result.to_dict()) == {"kind", "seed", "runs", "summary"}


def test_fixed_seeds_are_reproducible(data, selection):
    first, second = selection, _train(data)
    assert first.to_dict() == second.to_dict()
    assert np.array_equal(first.model.predict_proba(data.X_val), second.model.predict_proba(data.X_val))


def test_ties_go_to_logistic(data, monkeypatch):
    monkeypatch.setattr(select, "_score", lambda p, y: (0.5, 0.8))
    result = _train(data, kinds=("mlp", "logistic"), seeds=(3,))
    assert result.kind == "logistic"
    assert result.seed == 3


def test_bad_kinds_and_seeds_are_config_errors(data):
    with pytest.raises(ConfigError, match=r"classify\.kinds"):
        _train(data, kinds=("forest",))
    with pytest.raises(ConfigError, match=r"classify\.seeds"):
        _train(data, kinds=("logistic",), seeds=())


@pytest.mark.parametrize("kind", ["logistic", "mlp"])
def test_out_of_fold_predictions_come_from_models_that_never_saw_the_row(data, kind):
    from workbench.calibration.oof import stratified_folds
    from workbench.classify.select import fit_one, out_of_fold_proba, split_train_val

    X, y = data.X_train, data.y_train
    folds = stratified_folds(y, 3, seed=0)
    kw = {"seed": 1, "mlp_config": SMALL_MLP, "feature_names": FEATURE_NAMES, "logistic_C": 1.0}
    p = out_of_fold_proba(kind, X, y, folds, val_fraction=0.3, **kw)
    assert p.shape == y.shape and np.isfinite(p).all() and ((p >= 0) & (p <= 1)).all()
    held = folds == 1
    rows = np.flatnonzero(~held)
    if kind == "mlp":  # the refit early-stops on a split of its own training rows, not on the held-out fold
        train, val = split_train_val(y[rows], 0.3, 1)
        alone = fit_one(kind, X[rows][train], y[rows][train], X[rows][val], y[rows][val], **kw)
    else:
        alone = fit_one(kind, X[rows], y[rows], None, None, **kw)
    assert np.allclose(p[held], alone.predict_proba(X[held]), atol=1e-6)
    in_sample = fit_one(kind, X, y, data.X_val, data.y_val, **kw).predict_proba(X)
    assert not np.allclose(p, in_sample, atol=1e-3)  # out of fold is not the in-sample fit
