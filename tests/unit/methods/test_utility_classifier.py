"""D²-RAG's three-class gold-free utility classifier (issue 17 item 2, spec §13.1): it says "noisy" where the ridge
predictor cut at τ_neg never does, its dev-set biases, its JSON round trip, the out-of-fold figures next to the
majority baseline, and D²-RAG decoding with the class it predicts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.core.errors import DataError
from workbench.methods.d2rag import decoding_class
from workbench.methods.seper.utility import UTILITY_CLASSES, UTILITY_FEATURES, UtilityEstimate
from workbench.methods.seper.utility_classifier import UtilityClassifier, class_labels, macro_f1
from workbench.stages.fit_utility.run import class_quality, fit_and_score, fold_ids, majority_out_of_fold

TAU_POS, TAU_NEG = 0.12, -0.10


def _planted(n: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Features whose first column decides the class (noisy a 20 % minority, as in the reference runs), plus noise;
    ΔSePer labels a little past the thresholds, so a regression onto them shrinks the noisy ones above τ_neg."""
    rng = np.random.default_rng(seed)
    klass = rng.choice(3, size=n, p=[0.2, 0.5, 0.3])  # noisy, neutral, relevant
    X = rng.normal(size=(n, len(UTILITY_FEATURES)))
    X[:, 0] = klass + 0.25 * rng.normal(size=n)
    delta = np.choose(klass, [-0.12, 0.0, 0.14]) + 0.01 * rng.normal(size=n)
    delta[klass == 0] = np.minimum(delta[klass == 0], -0.101)
    delta[klass == 2] = np.maximum(delta[klass == 2], 0.121)
    return X, delta


class _Section:
    def __init__(self, model: str, dev_fraction: float = 0.25) -> None:
        self.model, self.dev_fraction, self.l2, self.folds = model, dev_fraction, 1.0, 5


def test_the_classifier_says_noisy_where_the_ridge_cut_at_tau_neg_never_does():
    # the failure: regression towards the mean keeps every prediction above τ_neg, so "noisy" is never
    # predicted; the classifier predicts it, and beats the majority baseline out of fold
    X, delta = _planted()
    X[:, 0] += 1.5 * np.random.default_rng(1).normal(size=X.shape[0])  # a weak signal: the ridge shrinks hard
    ridge = fit_and_score(_Section("ridge"), X, delta, seed=0, tau_pos=TAU_POS, tau_neg=TAU_NEG)[2]
    clf = fit_and_score(_Section("classifier"), X, delta, seed=0, tau_pos=TAU_POS, tau_neg=TAU_NEG)[2]
    assert ridge["labels"]["noisy"] == clf["labels"]["noisy"] > 0
    noisy = clf["labels"]["noisy"]
    assert ridge["predicted"]["noisy"] <= 0.1 * noisy  # 1 of 24 here
    assert clf["predicted"]["noisy"] >= 0.5 * noisy and clf["recall"]["noisy"] > 0.2
    assert clf["macro_f1"] > clf["majority"]["macro_f1"]


def test_out_of_fold_figures_sit_next_to_the_majority_baseline():
    X, delta = _planted()
    model, columns, quality, fitted = fit_and_score(_Section("classifier"), X, delta, 0, TAU_POS, TAU_NEG)
    assert isinstance(model, UtilityClassifier) and model.n_train_ == delta.size
    assert quality["class_agreement"] > quality["majority_agreement"] + 0.2  # the planted column is learnable
    assert quality["majority"]["classes"] == ["neutral"] and quality["majority"]["predicted"]["neutral"] == 120
    assert set(columns) == {"oof_class", *(f"oof_p_{c}" for c in UTILITY_CLASSES)}
    rows = np.array([[columns[f"oof_p_{c}"][i] for c in UTILITY_CLASSES] for i in range(delta.size)])
    assert np.allclose(rows.sum(axis=1), 1.0)
    assert set(fitted["coefficients"]) == set(UTILITY_CLASSES) and set(fitted["biases"]) == set(UTILITY_CLASSES)


def test_out_of_fold_classes_come_from_models_that_never_saw_the_row():
    X, delta = _planted(60, seed=3)
    section = _Section("classifier")
    _, columns, _, _ = fit_and_score(section, X, delta, 0, TAU_POS, TAU_NEG)
    folds = fold_ids(delta.size, section.folds, 0)
    held = folds == 2
    alone = UtilityClassifier(1.0, dev_fraction=0.25, seed=0).fit(X[~held], delta[~held])
    assert [c for c, h in zip(columns["oof_class"], held, strict=True) if h] == alone.predict(X[held])


def test_class_quality_and_majority_baseline_hand_computed():
    truth = ["noisy", "neutral", "neutral", "relevant", "relevant", "neutral"]
    guess = ["noisy", "neutral", "relevant", "relevant", "neutral", "neutral"]
    q = class_quality(truth, guess)
    assert q["class_agreement"] == pytest.approx(4 / 6)
    assert q["recall"] == {"noisy": 1.0, "neutral": pytest.approx(2 / 3), "relevant": 0.5}
    # F1: noisy 2/2 = 1; neutral 2·2/(4 + 1 + 1) = 2/3; relevant 2·1/(2 + 1 + 1) = 1/2
    assert q["macro_f1"] == pytest.approx((1 + 2 / 3 + 1 / 2) / 3)
    assert q["confusion"]["relevant"] == {"noisy": 0, "neutral": 1, "relevant": 1}
    assert q["predicted"] == {"noisy": 1, "neutral": 3, "relevant": 2}
    # each fold gets the other folds' commonest class
    folds = np.array([0, 0, 0, 1, 1, 1])
    assert majority_out_of_fold(["relevant", "relevant", "noisy", "neutral", "neutral", "relevant"], folds) == [
        "neutral",
        "neutral",
        "neutral",
        "relevant",
        "relevant",
        "relevant",
    ]
    assert macro_f1(["neutral"] * 3, ["neutral"] * 3) == 1.0
    with pytest.raises(DataError, match="labels"):
        macro_f1(["neutral"], [])


def test_class_labels_cut_like_d2rag():
    assert class_labels([0.12, 0.13, -0.10, -0.11], TAU_POS, TAU_NEG).tolist() == [
        "neutral",
        "relevant",
        "neutral",
        "noisy",
    ]


def test_dev_biases_are_chosen_on_held_out_rows_and_zero_without_a_dev_split():
    X, delta = _planted()
    with_dev = UtilityClassifier(1.0, dev_fraction=0.25).fit(X, delta)
    assert with_dev.dev_rows_ == pytest.approx(0.25 * delta.size, abs=3) and with_dev.bias_[1] == 0.0
    without = UtilityClassifier(1.0, dev_fraction=0.0).fit(X, delta)
    assert without.dev_rows_ == 0 and not without.bias_.any()
    # the biases shift the decision: a large noisy bias turns every row noisy
    without.bias_ = np.array([50.0, 0.0, 0.0])
    assert set(without.predict(X)) == {"noisy"}


def test_json_round_trip_is_exact_and_tampering_is_refused():
    X, delta = _planted()
    clf = UtilityClassifier(0.5, seed=2).fit(X, delta)
    d = clf.to_dict()
    back = UtilityClassifier.from_dict(json.loads(json.dumps(d)))
    assert json.dumps(back.to_dict(), sort_keys=True) == json.dumps(d, sort_keys=True)
    assert back.predict(X) == clf.predict(X) and np.allclose(back.predict_proba(X), clf.predict_proba(X))
    for key, value, match in [
        ("classes", ["relevant", "noisy", "neutral"], "order"),
        ("classes", ["noisy", "bogus"], "classes"),
        ("scale", [0.0] * len(UTILITY_FEATURES), "positive"),
        ("coef", [[1.0]], "coef"),
        ("kind", "ridge_utility", "kind"),
    ]:
        with pytest.raises(DataError, match=match):
            UtilityClassifier.from_dict({**d, key: value})
    with pytest.raises(DataError, match="keys"):
        UtilityClassifier.from_dict({**d, "extra": 1})


def test_one_class_and_bad_input():
    X, _ = _planted(10)
    only = UtilityClassifier(dev_fraction=0.25).fit(X, np.full(10, 0.5))
    assert set(only.predict(X)) == {"relevant"} and np.allclose(only.predict_proba(X)[:, 2], 1.0)
    with pytest.raises(DataError, match="tau_neg"):
        UtilityClassifier(tau_pos=-0.2, tau_neg=0.1)
    with pytest.raises(DataError, match="finite"):
        UtilityClassifier().fit(X, np.full(10, np.nan))
    with pytest.raises(DataError, match="columns"):
        UtilityClassifier().fit(X[:, :2], np.zeros(10))
    with pytest.raises(RuntimeError, match="not fitted"):
        UtilityClassifier().predict(X)


def test_d2rag_decodes_with_the_classifier_class_not_its_own_taus():
    estimate = UtilityEstimate(np.full(2, np.nan), "learned", classes=["noisy", "relevant"])
    assert decoding_class(estimate, 0, TAU_POS, TAU_NEG) == ("noisy", "classifier")
    assert decoding_class(estimate, 1, 0.99, -0.99) == ("relevant", "classifier")  # τ's play no part
    delta = UtilityEstimate(np.array([-0.5]), "learned")
    assert decoding_class(delta, 0, TAU_POS, TAU_NEG) == ("noisy", "delta")
    with pytest.raises(DataError, match="unknown utility class"):
        decoding_class(UtilityEstimate(np.full(1, np.nan), "learned", classes=["maybe"]), 0, TAU_POS, TAU_NEG)
