"""The feature registry and the stat names contract."""

from __future__ import annotations

import json
from collections import Counter

import pytest

import workbench.uncertainty as uncertainty
import workbench.uncertainty.features as features_module
from workbench.core.errors import ConfigError
from workbench.uncertainty import STATS, MissingStatError
from workbench.uncertainty.features import (
    FEATURES,
    SEED_FEATURES,
    compute_features,
    get_features,
    required_stats,
)

EXPECTED_ORIENTATION = {
    "entropy": -1,
    "semantic_entropy": -1,
    "mars": -1,
    "lars": 1,
    "sent_sar": -1,
    "token_sar": -1,
    "confidence": 1,
    "inside": -1,
    "attention_score": 1,
    "eccentricity_uncertainty": -1,
    "eccentricity_confidence": -1,
    "matrix_degree_confidence": 1,
    "matrix_degree_uncertainty": -1,
    "sum_eigen_uncertainty": -1,
    "ptrue": 1,
    "verbalized_confidence": 1,
    "self_detection": -1,
    "directional_entailment_graph": -1,
    "dtr_nll": -1,
    "dense": -1,
}


def test_registry_names_orientation_and_gold():
    assert set(FEATURES) == set(EXPECTED_ORIENTATION)
    assert {n: f.orientation for n, f in FEATURES.items()} == EXPECTED_ORIENTATION
    assert not any(f.requires_gold for f in FEATURES.values())
    assert all(set(f.stats) <= set(STATS) and f.version for f in FEATURES.values())


def test_d2rag_order_and_category_counts():
    assert len(SEED_FEATURES) == 18
    # the feature set is no method's: the former alias named after D²-RAG is gone from both import paths
    assert not hasattr(features_module, "D2RAG_FEATURES") and not hasattr(uncertainty, "D2RAG_FEATURES")
    assert SEED_FEATURES[0] == "entropy" and SEED_FEATURES[17] == "directional_entailment_graph"
    counts = Counter(FEATURES[n].category for n in SEED_FEATURES)
    # spec §3.1 note A: 6 probability / 2 internal / 8 consistency / 2 self-checking
    assert counts == {"probability": 6, "internal": 2, "consistency": 8, "self-checking": 2}


def test_required_stats_unions():
    assert required_stats(["entropy", "confidence"]) == {"sample_logprobs", "greedy_logprobs"}
    assert required_stats(["sum_eigen_uncertainty", "matrix_degree_confidence"]) == {
        "nli_probs",
        "nli_index_samples",
        "nli_index_greedy",
    }
    assert required_stats(["dtr_nll"]) == {"greedy_logprobs", "greedy_eos"}
    assert required_stats([]) == set()
    assert required_stats() == set().union(*(f.stats for f in FEATURES.values()))


def test_get_features_order_and_unknown_names():
    assert [f.name for f in get_features(["dense", "lars"])] == ["dense", "lars"]
    assert len(get_features()) == len(FEATURES)
    with pytest.raises(ConfigError, match="bogus"):
        get_features(["entropy", "bogus"])


def test_missing_stat_errors_name_the_stat():
    with pytest.raises(MissingStatError, match="LarsLikeScorer"):
        FEATURES["lars"].compute({})
    with pytest.raises(MissingStatError, match="greedy_eos"):
        FEATURES["dtr_nll"].compute({"greedy_logprobs": [-0.1], "greedy_eos": None})
    out = compute_features({"greedy_logprobs": [-0.2, -0.4]}, ["confidence", "lars"], on_missing="nan")
    assert out["confidence"] == pytest.approx(-0.3)
    assert out["lars"] != out["lars"]  # NaN
    with pytest.raises(MissingStatError):
        compute_features({}, ["lars"])


def test_describe_is_json_ready():
    described = [f.describe() for f in FEATURES.values()]
    assert json.loads(json.dumps(described))[1]["params"]["multiplicity"] == "samples"
    for name, spec in STATS.items():
        assert spec.name == name and spec.doc and spec.shape and spec.type
