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


def test_auroc_is_sklearns_roc_auc_score_on_random_data():
    import numpy as np
    import pytest
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(5, 300))
        y = rng.integers(0, 2, n).astype(float)
        s = np.round(y * 0.4 + rng.normal(size=n), 1)  # with ties
        if y.min() == y.max():
            continue
        assert auroc(s, y) == roc_auc_score(y, s)
        # ±inf keeps its rank: same area as with the infinities replaced by values past the finite range
        t = s.copy()
        t[:2] = [np.inf, -np.inf]
        u = t.copy()
        u[:2] = [s.max() + 1.0, s.min() - 1.0]
        assert auroc(t, y) == pytest.approx(roc_auc_score(y, u), abs=1e-15)
    with pytest.raises(ValueError, match="2 scores but 3 labels"):
        auroc([0.1, 0.2], [0, 1, 1])
    assert math.isnan(auroc([0.1, 0.2, 0.3], [1, float("nan"), 1]))
    assert math.isnan(auroc([], []))


def test_auroc_rows_equals_roc_auc_score_on_every_resample():
    import numpy as np

    from workbench.metrics.ranking import auroc_rows

    rng = np.random.default_rng(1)
    n = 40
    y = (rng.random(n) < 0.3).astype(float)
    s = np.round(y + rng.normal(size=n), 1)  # ties
    s[:3] = [np.nan, np.inf, -np.inf]
    y[5] = np.nan
    idx = rng.integers(0, n, (300, n))
    rows = auroc_rows(s[idx], y[idx])
    one_by_one = np.array([auroc(s[i], y[i]) for i in idx])  # roc_auc_score
    assert np.array_equal(np.isnan(rows), np.isnan(one_by_one))
    np.testing.assert_allclose(rows, one_by_one, rtol=0, atol=1e-12)
    assert math.isnan(float(auroc_rows(np.array([0.1, 0.2]), np.array([1.0, 1.0]))))
