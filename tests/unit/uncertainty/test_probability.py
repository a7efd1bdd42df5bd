"""Probability-based features from hand-made log-probs, and the LARS-like scorer."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from workbench.core.errors import DataError
from workbench.uncertainty.features import FEATURES
from workbench.uncertainty.features.probability import (
    LarsLikeScorer,
    Mars,
    heuristic_token_importance,
)

LN = math.log


def test_entropy_from_sample_lns():
    stats = {"sample_logprobs": [[-0.1, -0.3], [-0.2], [], [-1.0, -0.5, -0.6]]}
    # LNS = [−0.2, −0.2, (empty: skipped), −0.7] → H = (0.2 + 0.2 + 0.7)/3 = 0.366667
    assert FEATURES["entropy"].raw(stats) == pytest.approx(1.1 / 3)
    assert FEATURES["entropy"].compute(stats) == pytest.approx(-1.1 / 3)
    assert math.isnan(FEATURES["entropy"].raw({"sample_logprobs": [[], []]}))


def test_confidence_and_dtr_nll():
    stats = {"greedy_logprobs": [-0.6, -0.2, -0.1], "greedy_eos": True}
    # Confidence keeps EOS: (−0.6 − 0.2 − 0.1)/3 = −0.3
    assert FEATURES["confidence"].compute(stats) == pytest.approx(-0.3)
    # DTR drops EOS: u = (0.6 + 0.2)/2 = 0.4; oriented −0.4
    assert FEATURES["dtr_nll"].raw(stats) == pytest.approx(0.4)
    assert FEATURES["dtr_nll"].compute(stats) == pytest.approx(-0.4)
    # without EOS the last token counts: (0.6 + 0.2 + 0.1)/3 = 0.3
    assert FEATURES["dtr_nll"].raw({**stats, "greedy_eos": False}) == pytest.approx(0.3)
    # EOS-only answer → u = +∞ (retrieve); no token at all → Confidence undefined (NaN)
    only_eos = {"greedy_logprobs": [-0.05], "greedy_eos": True}
    assert FEATURES["dtr_nll"].raw(only_eos) == math.inf
    assert FEATURES["dtr_nll"].compute(only_eos) == -math.inf
    assert math.isnan(FEATURES["confidence"].raw({"greedy_logprobs": []}))
    # a −∞ log-prob is floored at ln 1e-12: u = (27.631021 + 0)/2
    floored = {"greedy_logprobs": [-math.inf, 0.0], "greedy_eos": False}
    assert FEATURES["dtr_nll"].raw(floored) == pytest.approx(-LN(1e-12) / 2)


def test_mars_token_weights():
    stats = {"greedy_logprobs": [LN(0.5), LN(0.25), LN(0.9)], "greedy_eos": True, "token_importance": [1.0, 0.0]}
    # answer NLL = [ln 2, ln 4]; w̃ = softmax([1, 0]/0.1) = [1/(1+e^−10), e^−10/(1+e^−10)]
    w1 = 1 / (1 + math.exp(-10))
    weighted = w1 * LN(2) + (1 - w1) * LN(4)
    mean_nll = (LN(2) + LN(4)) / 2
    assert FEATURES["mars"].raw(stats) == pytest.approx(0.5 * weighted + 0.5 * mean_nll)  # ≈ 0.866450
    # uniform importance → MARS = mean NLL
    assert FEATURES["mars"].raw({**stats, "token_importance": [0.3, 0.3]}) == pytest.approx(mean_nll)
    with pytest.raises(DataError):
        FEATURES["mars"].raw({**stats, "token_importance": [1.0, 0.0, 0.0]})
    assert Mars(temperature=1.0).params() == {"temperature": 1.0}


def test_heuristic_token_importance():
    tokens = ["ĠThe", "ĠEiffel", "ĠTower", "Ġis", "Ġin", "ĠParis", ".", "▁1889"]
    assert heuristic_token_importance(tokens).tolist() == [0.1, 1.0, 1.0, 0.1, 0.1, 1.0, 0.1, 1.0]
    assert heuristic_token_importance([]).shape == (0,)


def test_token_sar_relevance_weights():
    stats = {"greedy_logprobs": [LN(0.5), LN(0.25), LN(0.8)], "greedy_eos": True, "token_relevance": [0.3, 0.1]}
    # w = [0.3, 0.1]/0.4 = [0.75, 0.25]; TokenSAR = 0.75 ln 2 + 0.25 ln 4 = 0.519860 + 0.346574
    assert FEATURES["token_sar"].raw(stats) == pytest.approx(0.866434, abs=1e-6)
    assert FEATURES["token_sar"].compute(stats) == pytest.approx(-0.866434, abs=1e-6)
    # all relevances 0 → uniform weights → mean NLL = (ln 2 + ln 4)/2
    assert FEATURES["token_sar"].raw({**stats, "token_relevance": [0.0, 0.0]}) == pytest.approx(LN(8) / 2)
    with pytest.raises(DataError):
        FEATURES["token_sar"].raw({**stats, "token_relevance": [0.3, 0.1, 0.2]})


def test_sent_sar_from_similarities():
    stats = {"sample_logprobs": [[LN(0.5)], [LN(0.25)]], "sts_samples": [[1.0, 0.002], [0.002, 1.0]]}
    # p = [0.5, 0.25], t = 0.001:
    #   k=1: 0.5 + 1000 · 0.002 · 0.25 = 1.0   → −ln 1.0  = 0
    #   k=2: 0.25 + 1000 · 0.002 · 0.5 = 1.25 → −ln 1.25 = −0.223144
    assert FEATURES["sent_sar"].raw(stats) == pytest.approx(-LN(1.25) / 2)
    # g = 0 → SentSAR = mean(−ln p) = (ln 2 + ln 4)/2
    no_sim = {**stats, "sts_samples": np.zeros((2, 2))}
    assert FEATURES["sent_sar"].raw(no_sim) == pytest.approx(LN(8) / 2)
    with pytest.raises(DataError):
        FEATURES["sent_sar"].raw({**stats, "sts_samples": np.zeros((1, 1))})


def _synthetic_lars_data(n: int = 60) -> tuple[list[np.ndarray], list[int]]:
    rng = np.random.default_rng(0)
    lists, labels = [], []
    for i in range(n):
        correct = i % 2
        low, high = (0.85, 1.0) if correct else (0.05, 0.6)
        lists.append(np.log(rng.uniform(low, high, size=rng.integers(1, 8))))
        labels.append(correct)
    return lists, labels


def scorer_dict() -> dict:
    return LarsLikeScorer().fit(*_synthetic_lars_data()).to_dict()


def test_lars_like_scorer_fit_predict_roundtrip():
    lists, labels = _synthetic_lars_data()
    scorer = LarsLikeScorer().fit(lists, labels)
    confident = scorer.predict(np.log([0.97, 0.95, 0.99]))
    unsure = scorer.predict(np.log([0.2, 0.3]))
    assert 0.5 < confident < 1.0 and 0.0 < unsure < 0.5
    preds = scorer.predict_many(lists)
    assert ((preds > 0.5).astype(int) == np.array(labels)).mean() >= 0.95
    text = json.dumps(scorer.to_dict())
    assert json.loads(text)["kind"] == "lars"
    again = LarsLikeScorer.from_dict(json.loads(text))
    assert again.predict_many(lists) == pytest.approx(preds)


def test_lars_like_scorer_features_and_errors():
    scorer = LarsLikeScorer()
    feats = scorer.featurize([LN(0.95), LN(0.05)])
    # 0.95 ∈ (0.9, 0.99] → bin 5; 0.05 ∈ [0, 0.1] → bin 0; then mean, min log-prob and ln(1 + 2)
    expected = [0.5, 0, 0, 0, 0, 0.5, 0, (LN(0.95) + LN(0.05)) / 2, LN(0.05), LN(3)]
    assert feats == pytest.approx(expected)
    assert scorer.featurize([]) == pytest.approx(np.zeros(10))
    with pytest.raises(RuntimeError, match="not fitted"):
        scorer.predict([LN(0.5)])
    with pytest.raises(DataError):
        scorer.fit([[LN(0.5)], [LN(0.6)]], [1, 1])
    with pytest.raises(DataError):
        scorer.fit([[LN(0.5)]], [1, 0])
    with pytest.raises(ValueError):
        LarsLikeScorer(edges=[0.0, 0.5, 0.5, 1.0])
    with pytest.raises(DataError):
        LarsLikeScorer.from_dict({"kind": "other"})
    with pytest.raises(DataError, match="non-finite"):
        LarsLikeScorer.from_dict({**scorer_dict(), "intercept": float("nan")})


def test_lars_feature_reads_the_score():
    assert FEATURES["lars"].compute({"lars_score": 0.8}) == pytest.approx(0.8)
