"""Threshold rules on hand-made cases; every expected τ is worked out in the comments."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.classify.threshold import ABOVE_ONE, candidate_thresholds, choose_threshold
from workbench.core.errors import ConfigError, DataError

# Six validation examples, in original order (label 1 = closed-book answer correct):
#   idx   p     y   qa_closed  qa_rag
#   0    0.10   0      0         1
#   1    0.40   0      0         0
#   2    0.35   1      1         0
#   3    0.80   1      1         1
#   4    0.90   1      1         1
#   5    0.60   0      0         1
# Sorted p: 0.10 (y0), 0.35 (y1), 0.40 (y0), 0.60 (y0), 0.80 (y1), 0.90 (y1)
# Candidates τ: 0, 0.225, 0.375, 0.5, 0.7, 0.85, 1+ε  →  retrieved (p < τ): 0, 1, 2, 3, 4, 5, 6 examples.
P = np.array([0.10, 0.40, 0.35, 0.80, 0.90, 0.60])
Y = np.array([0, 0, 1, 1, 1, 0])
QA_CLOSED = np.array([0, 0, 1, 1, 1, 0])
QA_RAG = np.array([1, 0, 0, 1, 1, 1])


def test_candidates_are_zero_midpoints_and_above_one():
    np.testing.assert_allclose(candidate_thresholds(P), [0, 0.225, 0.375, 0.5, 0.7, 0.85, ABOVE_ONE])
    assert ABOVE_ONE > 1.0
    np.testing.assert_allclose(candidate_thresholds(np.array([0.3, 0.3, 0.7])), [0, 0.5, ABOVE_ONE])


def test_max_f1_of_the_retrieve_class():
    # Positives = incorrect answers (y = 0): 3 of them. F1 = 2·TP / (retrieved + 3).
    # retrieved 0..6 → TP 0, 1, 1, 2, 3, 3, 3 → F1 0, 2/4, 2/5, 4/6, 6/7, 6/8, 6/9.
    # Maximum 6/7 at 4 retrieved: τ = (0.6 + 0.8) / 2 = 0.7, retrieval rate 4/6.
    choice = choose_threshold(P, Y, rule="max_f1")
    assert choice.tau == pytest.approx(0.7)
    assert choice.value == pytest.approx(6 / 7)
    assert choice.retrieval_rate == pytest.approx(4 / 6)
    assert choice.rule == "max_f1"


def test_max_f1_ties_take_the_smallest_tau():
    # p = [0.2, 0.8], y = [0, 0]: F1 at 0, 1, 2 retrieved = 0, 2/3, 1 → τ = 1+ε (all retrieved).
    assert choose_threshold([0.2, 0.8], [0, 0], rule="max_f1").tau == ABOVE_ONE
    # p = [0.2, 0.4, 0.6, 0.8], y = [0, 1, 1, 0]: TP 0, 1, 1, 1, 2 for 0..4 retrieved; F1 = 2·TP / (retrieved + 2)
    # = 0, 2/3, 2/4, 2/5, 4/6 → 2/3 first at 1 retrieved (τ = 0.3) and again at 4 (τ = 1+ε): the smaller wins.
    choice = choose_threshold([0.2, 0.4, 0.6, 0.8], [0, 1, 1, 0], rule="max_f1")
    assert choice.tau == pytest.approx(0.3)
    assert choice.value == pytest.approx(2 / 3)


def test_target_rate_takes_the_smallest_tau_reaching_the_rate():
    # Rates for the candidates: 0, 1/6, 2/6, 3/6, 4/6, 5/6, 1.
    # target 0.5 → first rate ≥ 0.5 is 3/6 at τ = (0.4 + 0.6) / 2 = 0.5.
    choice = choose_threshold(P, Y, rule="target_rate", target_rate=0.5)
    assert (choice.tau, choice.retrieval_rate, choice.value) == pytest.approx((0.5, 0.5, 0.5))
    # target 0.4 → 2/6 < 0.4 ≤ 3/6: again τ = 0.5. target 0 → τ = 0 (never retrieve). target 1 → τ = 1+ε.
    assert choose_threshold(P, Y, rule="target_rate", target_rate=0.4).tau == pytest.approx(0.5)
    assert choose_threshold(P, Y, rule="target_rate", target_rate=0.0).tau == 0.0
    assert choose_threshold(P, Y, rule="target_rate", target_rate=1.0).tau == ABOVE_ONE


def test_max_routed_score():
    # Sorted by p the gains (qa_rag − qa_closed) are: idx0 +1, idx2 −1, idx1 0, idx5 +1, idx3 0, idx4 0.
    # Closed-book total = 3; totals for 0..6 retrieved = 3, 4, 3, 3, 4, 4, 4 → means 3/6, 4/6, 3/6, 3/6, 4/6, ...
    # The maximum 4/6 is first reached with 1 retrieved: τ = (0.10 + 0.35) / 2 = 0.225, retrieval rate 1/6.
    choice = choose_threshold(P, Y, rule="max_routed_score", qa_closed=QA_CLOSED, qa_rag=QA_RAG)
    assert choice.tau == pytest.approx(0.225)
    assert choice.value == pytest.approx(4 / 6)
    assert choice.retrieval_rate == pytest.approx(1 / 6)


def test_routed_score_with_graded_scores():
    # p = [0.2, 0.5, 0.9]; closed = [0.1, 0.5, 0.9]; rag = [0.7, 0.8, 0.6] → gains +0.6, +0.3, −0.3.
    # Totals for 0..3 retrieved: 1.5, 2.1, 2.4, 2.1 → best 2.4 / 3 = 0.8 at 2 retrieved, τ = (0.5 + 0.9) / 2 = 0.7.
    choice = choose_threshold(
        [0.2, 0.5, 0.9], [0, 1, 1], rule="max_routed_score", qa_closed=[0.1, 0.5, 0.9], qa_rag=[0.7, 0.8, 0.6]
    )
    assert choice.tau == pytest.approx(0.7)
    assert choice.value == pytest.approx(0.8)


def test_bad_rules_and_arguments():
    with pytest.raises(ConfigError, match="unknown rule"):
        choose_threshold(P, Y, rule="max_accuracy")
    with pytest.raises(ConfigError, match="target_rate"):
        choose_threshold(P, Y, rule="target_rate")
    with pytest.raises(ConfigError, match="target_rate"):
        choose_threshold(P, Y, rule="target_rate", target_rate=1.5)
    with pytest.raises(ConfigError, match="qa_closed and qa_rag"):
        choose_threshold(P, Y, rule="max_routed_score", qa_closed=QA_CLOSED)
    with pytest.raises(DataError, match="qa_rag"):
        choose_threshold(P, Y, rule="max_routed_score", qa_closed=QA_CLOSED, qa_rag=QA_RAG[:3])
    with pytest.raises(DataError, match=r"\[0, 1\]"):
        choose_threshold([0.5, 1.2], [0, 1], rule="max_f1")
    with pytest.raises(DataError, match="no incorrect answers"):
        choose_threshold([0.5, 0.7], [1, 1], rule="max_f1")
