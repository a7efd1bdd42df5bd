"""AUROC against hand-computed values."""

from __future__ import annotations

import math

from workbench.metrics.ranking import auroc


def test_auroc_hand_computed():
    # positives 0.9, 0.4; negatives 0.5, 0.1: pairs (0.9>0.5, 0.9>0.1, 0.4<0.5, 0.4>0.1) → 3/4
    assert auroc([0.9, 0.5, 0.4, 0.1], [1, 0, 1, 0]) == 0.75
    assert auroc([1, 2, 3], [0, 1, 1]) == 1.0 and auroc([3, 2, 1], [0, 1, 1]) == 0.0


def test_auroc_ties_nan_and_one_class():
    assert auroc([0.5, 0.5], [1, 0]) == 0.5
    assert auroc([0.9, float("nan"), 0.1], [1, 1, 0]) == 1.0
    assert math.isnan(auroc([0.1, 0.2], [1, 1]))
    assert auroc([float("-inf"), 1.0], [0, 1]) == 1.0
