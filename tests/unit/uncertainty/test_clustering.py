"""Semantic clustering from NLI labels and the entropies on top of it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.unit.uncertainty.helpers import C, E, N, onehot_nli
from workbench.uncertainty.clustering import cluster_entropy, semantic_clusters, semantic_entropy


def test_greedy_rules_differ_on_neutral_pairs():
    labels = [
        [E, N, C],
        [N, E, C],
        [C, C, E],
    ]
    probs = onehot_nli(labels, confidence=0.8)
    # no contradiction either way: 0 and 1 (neutral both ways) join; 2 contradicts → its own cluster
    assert semantic_clusters(probs).tolist() == [0, 0, 1]
    # mutual entailment: neutral is not enough → three clusters
    assert semantic_clusters(probs, "mutual_entailment").tolist() == [0, 1, 2]
    with pytest.raises(ValueError):
        semantic_clusters(probs, "bogus")


def test_greedy_compares_with_first_member_only():
    # 1 agrees with 0; 2 contradicts 0 but not 1 → 2 cannot join cluster 0 (its first member is 0)
    labels = [
        [E, E, C],
        [E, E, E],
        [C, E, E],
    ]
    assert semantic_clusters(onehot_nli(labels)).tolist() == [0, 0, 1]


def test_semantic_entropy_eq19():
    ll = [math.log(0.5), math.log(0.3), math.log(0.2)]
    # clusters {0,1} and {2}: p(c0) = 0.5 + 0.3 = 0.8, p(c1) = 0.2; SE = −½(ln 0.8 + ln 0.2) = ½(0.223144 + 1.609438)
    assert semantic_entropy([0, 0, 1], ll) == pytest.approx(0.916291, abs=1e-6)


def test_semantic_entropy_multiplicity_options():
    ll = [math.log(0.5), math.log(0.5), math.log(0.2)]
    keys = ["paris", "paris", "lyon"]  # samples 0 and 1 are the same string
    # samples: c0 = 0.5 + 0.5 = 1 → ln 1 = 0; SE = −½(0 + ln 0.2) = 0.804719
    assert semantic_entropy([0, 0, 1], ll, keys, "samples") == pytest.approx(0.804719, abs=1e-6)
    # unique: c0 = 0.5 → SE = −½(ln 0.5 + ln 0.2) = 1.151293
    assert semantic_entropy([0, 0, 1], ll, keys, "unique") == pytest.approx(1.151293, abs=1e-6)
    # ttlm: each of the 2 copies counted 2× → c0 = 4 · 0.5 = 2 → SE = −½(ln 2 + ln 0.2) = 0.458145
    assert semantic_entropy([0, 0, 1], ll, keys, "ttlm") == pytest.approx(0.458145, abs=1e-6)
    # TTLM's released data: 5 identical samples with LNS = 0 → truth value −SE = ln 25
    assert -semantic_entropy([0] * 5, [0.0] * 5, ["a"] * 5, "ttlm") == pytest.approx(math.log(25))
    assert semantic_entropy([], []) != semantic_entropy([], [])  # NaN for no samples
    with pytest.raises(ValueError):
        semantic_entropy([0], [0.0], multiplicity="bogus")


def test_cluster_entropy():
    # sizes 3, 1, 1 of 5: −(0.6 ln 0.6 + 2 · 0.2 ln 0.2) = 0.306495 + 0.643775
    assert cluster_entropy([0, 0, 0, 1, 2]) == pytest.approx(0.950271, abs=1e-6)
    assert cluster_entropy([0, 0, 0]) == 0.0
    assert cluster_entropy(np.arange(4)) == pytest.approx(math.log(4))
    assert math.isnan(cluster_entropy([]))
