"""Property checks: agreeing answers must look more certain than disagreeing answers for every consistency feature."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.unit.uncertainty.helpers import consistency_stats
from workbench.uncertainty.features import FEATURES

CONSISTENCY = sorted(n for n, f in FEATURES.items() if f.category == "consistency")


def test_consistency_list_is_complete():
    assert len(CONSISTENCY) == 9  # the 8 D²-RAG consistency features + DENSE


@pytest.mark.parametrize("name", CONSISTENCY)
@pytest.mark.parametrize("n_samples", [5, 10])
def test_identical_answers_beat_different_answers(name, n_samples):
    feature = FEATURES[name]
    same = feature.compute(consistency_stats(agree=True, n_samples=n_samples))
    different = feature.compute(consistency_stats(agree=False, n_samples=n_samples))
    assert math.isfinite(same) and math.isfinite(different)
    assert same > different + 1e-6


def test_sent_sar_rewards_similar_samples():
    same = FEATURES["sent_sar"].compute(consistency_stats(agree=True))
    different = FEATURES["sent_sar"].compute(consistency_stats(agree=False))
    assert same > different


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_oriented_value_is_orientation_times_raw(name):
    feature = FEATURES[name]
    stats = {
        **consistency_stats(agree=False),
        "greedy_logprobs": [-0.3, -0.7, -0.05],
        "greedy_eos": True,
        "token_importance": [1.0, 0.1],
        "token_relevance": [0.4, 0.2],
        "sample_hidden": np.eye(6)[:5],
        "attention_logdiag": np.log([[0.5, 0.4], [0.3, 0.9]]),
        "lars_score": 0.6,
        "ptrue": 0.7,
        "verbalized_confidence": 0.8,
    }
    raw = feature.raw(stats)
    assert math.isfinite(raw)
    assert feature.compute(stats) == pytest.approx(feature.orientation * raw)


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_nan_inputs_give_nan_not_errors(name):
    feature = FEATURES[name]
    nan3 = np.full((6, 6, 3), np.nan)
    stats = {
        **consistency_stats(agree=False),
        "nli_probs": nan3,
        "paraphrase_nli_probs": nan3[:5, :5],
        "dense_nli_probs": nan3,
        "sample_logprobs": [[np.nan]] * 5,
        "sts_samples": np.full((5, 5), np.nan),
        "greedy_logprobs": [-0.3, -0.1, np.nan] if name in ("mars", "token_sar") else [np.nan, -0.1, -0.2],
        "greedy_eos": True,  # mars / token_sar drop the (NaN) EOS entry: their NaN must come from the weights
        "token_importance": [np.nan, 1.0],
        "token_relevance": [np.nan, 0.2],
        "sample_hidden": np.full((5, 4), np.nan),
        "attention_logdiag": np.full((2, 3), np.nan),
        "lars_score": np.nan,
        "ptrue": np.nan,
        "verbalized_confidence": np.nan,
    }
    assert math.isnan(feature.compute(stats))
