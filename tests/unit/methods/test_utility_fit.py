"""The fit_utility stage's pieces on hand-made data (folds, out-of-fold predictions, quality figures), the
learned-vs-oracle D²-RAG variants built by name, and their report lines."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.methods.d2rag.report import d2rag_utility_lines, utility_class_of
from workbench.methods.registry import GOLD_METHODS, METHODS, LearnedParts, build_method
from workbench.methods.seper.utility import OracleUtility, UtilityPredictor
from workbench.stages.fit_utility.run import fold_ids, out_of_fold, regression_quality


def test_fold_ids_deal_every_row_once_with_balanced_sizes():
    folds = fold_ids(11, 3, seed=0)
    assert sorted(np.bincount(folds).tolist()) == [3, 4, 4]
    assert np.array_equal(folds, fold_ids(11, 3, seed=0)) and not np.array_equal(folds, fold_ids(11, 3, seed=1))


def test_out_of_fold_predictions_never_see_their_own_row():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = 0.3 * X[:, 0] - 0.1 * X[:, 1]
    folds = fold_ids(40, 4, seed=0)
    pred = out_of_fold(X, y, folds, l2=0.0, feature_names=("a", "b"))
    held = folds == 0
    alone = UtilityPredictor(0.0, ("a", "b")).fit(X[~held], y[~held]).predict(X[held])
    assert np.allclose(pred[held], alone)
    assert np.allclose(pred, y, atol=1e-8)  # a noiseless linear target is recovered out of fold


def test_regression_quality_hand_computed():
    y = np.array([0.5, 0.0, -0.5, 0.2])
    pred = np.array([0.3, 0.0, -0.2, 0.0])
    q = regression_quality(y, pred, tau_pos=0.12, tau_neg=-0.10)
    # residual = 0.04 + 0 + 0.09 + 0.04 = 0.17; mean 0.05, total = 0.2025 + 0.0025 + 0.3025 + 0.0225 = 0.53
    assert q["r2"] == pytest.approx(1 - 0.17 / 0.53)
    assert q["mae"] == pytest.approx((0.2 + 0.0 + 0.3 + 0.2) / 4)
    assert q["mean_baseline_mae"] == pytest.approx((0.45 + 0.05 + 0.55 + 0.15) / 4)
    # classes: label relevant, neutral, noisy, relevant; predicted relevant, neutral, noisy, neutral
    assert q["class_agreement"] == pytest.approx(0.75) and q["majority_agreement"] == pytest.approx(0.5)
    assert q["confusion"]["relevant"] == {"noisy": 0, "neutral": 1, "relevant": 1}
    assert q["spearman"] == pytest.approx(0.8, abs=0.2) and q["spearman"] > 0


CALIBRATORS = {"confidence": {"kind": "isotonic", "version": 1, "x": [-20.0, 0.0], "y": [0.0, 1.0]}}


class _Classifier:
    def __init__(self, features=("confidence",)):
        self.feature_names = tuple(features)

    def predict_proba(self, X):
        return np.full((len(X), 2), 0.5)[:, 1]


def test_d2rag_variants_by_name_pick_learned_or_oracle_utility(tools):
    predictor = UtilityPredictor(1.0, ("a",)).fit(np.array([[0.0], [1.0]]), np.array([0.0, 0.5]))
    learned = LearnedParts(
        calibrators=CALIBRATORS, classifier=_Classifier(), tau=0.5, features=["confidence"], utility=predictor
    )
    assert {"d2rag", "d2rag_oracle"} <= set(METHODS) and "d2rag_oracle" in GOLD_METHODS
    method = build_method("d2rag", tools, {}, learned)
    assert method.utility is predictor and not method.requires_gold and method.name == "d2rag"
    oracle = build_method("d2rag_oracle", tools, {"seper_samples": 3, "utility_label": "delta_seper_h"}, learned)
    assert isinstance(oracle.utility, OracleUtility) and oracle.requires_gold and oracle.name == "d2rag_oracle"
    assert oracle.utility.settings.samples == 3 and oracle.utility.label == "delta_seper_h"
    without = build_method("d2rag", tools, {}, LearnedParts(CALIBRATORS, _Classifier(), 0.5, ["confidence"]))
    assert isinstance(without.utility, OracleUtility)


def _trace(klass: str) -> str:
    steps = [{"name": "features", "detail": {}}, {"name": "generate", "detail": {"class": klass}}]
    return json.dumps({"steps": steps})


def test_d2rag_side_by_side_lines_count_classes_and_agreement(tmp_path):
    import datasets

    rows = []
    for method, classes in (
        ("d2rag", ["relevant", "neutral", "closed"]),
        ("d2rag_oracle", ["relevant", "noisy", "closed"]),
    ):
        rows += [{"method": method, "id": str(i), "trace": _trace(c)} for i, c in enumerate(classes)]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "traces"))
    metrics = {"em": 0.0, "f1": 0.1, "contains": 0.5}
    (tmp_path / "summary.json").write_text(json.dumps({"methods": {"d2rag": metrics, "d2rag_oracle": metrics}}))
    lines = d2rag_utility_lines(tmp_path)
    assert "| learned | 0.000 | 0.100 | 0.500 | 1 | 1 | 0 | 1 |" in lines
    assert "| oracle ΔSePer | 0.000 | 0.100 | 0.500 | 1 | 0 | 1 | 1 |" in lines
    assert any("same class for 1 of the 2 retrieved questions" in line for line in lines)
    (tmp_path / "summary.json").write_text(json.dumps({"methods": {"d2rag": metrics}}))
    assert d2rag_utility_lines(tmp_path) == []  # nothing to compare without both variants
    assert utility_class_of(json.dumps({"steps": []})) == "closed"


def test_d2rag_gets_the_collections_lars_scorer(tools):
    from workbench.core.errors import ConfigError
    from workbench.uncertainty.features.probability import LarsLikeScorer

    rng = np.random.default_rng(0)
    answers = [list(rng.uniform(-3, 0, size=4)) for _ in range(20)]
    scorer = LarsLikeScorer().fit(answers, [i % 2 for i in range(20)])
    calibrators = {"lars": {"kind": "isotonic", "version": 1, "x": [0.0, 1.0], "y": [0.0, 1.0]}}
    learned = LearnedParts(calibrators, _Classifier(["lars"]), 0.5, ["lars"], lars_scorer=scorer)
    assert build_method("d2rag", tools, {}, learned).lars_scorer is scorer
    learned.lars_scorer = None
    with pytest.raises(ConfigError, match="lars_scorer"):
        build_method("d2rag", tools, {}, learned)
