"""Isotonic and centered isotonic calibrators: hand-made PAV cases, clipping, monotonicity, sklearn parity."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

from workbench.calibration import IsotonicCalibrator
from workbench.calibration.isotonic import pav_blocks
from workbench.core.errors import DataError

# scores 1..6 with labels 0, 1, 0, 0, 1, 1
S6 = [1, 2, 3, 4, 5, 6]
Y6 = [0, 1, 0, 0, 1, 1]


def test_pav_blocks_hand_computed():
    # PAV: 0 | 1 | 0 → 1 ≥ 0 pools {2, 3} = 1/2; 1/2 ≥ 0 (score 4) pools {2, 3, 4} = 1/3; 0 ≤ 1/3 stays
    # then 1, 1 (scores 5, 6): equal values pool into {5, 6} = 1
    blocks = pav_blocks(np.array(S6, dtype=float), np.array(Y6, dtype=float))
    assert [b.value for b in blocks] == pytest.approx([0.0, 1 / 3, 1.0])
    assert [(b.x_first, b.x_last) for b in blocks] == [(1, 1), (2, 4), (5, 6)]
    assert [b.x_mean for b in blocks] == pytest.approx([1.0, 3.0, 5.5])


def test_isotonic_breakpoints_hand_computed():
    # each block keeps its first and last score: (1, 0), (2, 1/3), (4, 1/3), (5, 1), (6, 1)
    cal = IsotonicCalibrator().fit(S6, Y6)
    d = cal.to_dict()
    assert d["kind"] == "isotonic" and d["version"] == 1
    assert d["x"] == [1.0, 2.0, 4.0, 5.0, 6.0]
    assert d["y"] == pytest.approx([0.0, 1 / 3, 1 / 3, 1.0, 1.0])
    # 1.5 is half-way from (1, 0) to (2, 1/3) → 1/6; 3 lies on the flat block → 1/3; 4.5 → (1/3 + 1) / 2 = 2/3
    np.testing.assert_allclose(cal.predict([1.5, 3.0, 4.5]), [1 / 6, 1 / 3, 2 / 3])


def test_isotonic_clips_outside_the_fitted_range():
    cal = IsotonicCalibrator().fit(S6, Y6)
    np.testing.assert_allclose(cal.predict([-100.0, 0.999, 6.001, 1e9]), [0.0, 0.0, 1.0, 1.0])


def test_isotonic_matches_sklearn():
    rng = np.random.default_rng(7)
    grid = np.linspace(-5, 5, 2001)
    for _ in range(20):
        n = int(rng.integers(10, 400))
        s = np.round(rng.normal(size=n), 1)  # with repeated scores
        y = (rng.random(n) < 1 / (1 + np.exp(-2 * s))).astype(float)
        if y.min() == y.max():
            continue
        ref = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(s, y)
        ours = IsotonicCalibrator().fit(s, y)
        np.testing.assert_allclose(ours.predict(grid), ref.predict(grid), atol=1e-12)
        np.testing.assert_allclose(ours.predict(s), ref.predict(s), atol=1e-12)


def test_centered_isotonic_hand_computed_interior_block():
    # scores 1..4 twice each; label means per score: 1 → 1/2, 2 → 1, 3 → 1/2, 4 → 1/2 (weight 2 each)
    # PAV: 1/2 | 1 | 1/2 → pool {2, 3} = 3/4; 3/4 ≥ 1/2 → pool {2, 3, 4} = (2 + 1 + 1) / 6 = 2/3
    # blocks: {1} = 1/2, {2, 3, 4} = 2/3 at weighted mean score (2 + 3 + 4) / 3 = 3
    # centered points: (1, 1/2), (3, 2/3), plus (4, 2/3) to reach the largest fitted score
    s = [1, 1, 2, 2, 3, 3, 4, 4]
    y = [0, 1, 1, 1, 0, 1, 1, 0]
    cir = IsotonicCalibrator(centered=True).fit(s, y)
    d = cir.to_dict()
    assert d["kind"] == "centered_isotonic"
    assert d["x"] == pytest.approx([1.0, 3.0, 4.0])
    assert d["y"] == pytest.approx([0.5, 2 / 3, 2 / 3])
    # at 2: half-way from (1, 1/2) to (3, 2/3) → 1/2 + 1/12 = 7/12; plain isotonic gives 2/3 there
    assert cir.predict([2.0])[0] == pytest.approx(7 / 12)
    assert IsotonicCalibrator().fit(s, y).predict([2.0])[0] == pytest.approx(2 / 3)


def test_centered_isotonic_keeps_flat_blocks_at_zero_and_one():
    # blocks of S6/Y6: {1} = 0 (stays at score 1), {2, 3, 4} = 1/3 → one point at mean score 3,
    # {5, 6} = 1 stays flat: (5, 1), (6, 1)
    cir = IsotonicCalibrator(centered=True).fit(S6, Y6)
    d = cir.to_dict()
    assert d["x"] == pytest.approx([1.0, 3.0, 5.0, 6.0])
    assert d["y"] == pytest.approx([0.0, 1 / 3, 1.0, 1.0])
    # at 2: (1, 0) → (3, 1/3) gives 1/6; at 4: (3, 1/3) → (5, 1) gives 2/3
    np.testing.assert_allclose(cir.predict([2.0, 4.0, 0.0, 7.0]), [1 / 6, 2 / 3, 0.0, 1.0])


def test_outputs_are_monotone_and_in_unit_interval():
    rng = np.random.default_rng(11)
    s = rng.normal(size=300)
    y = (rng.random(300) < 1 / (1 + np.exp(-s))).astype(float)
    grid = np.linspace(-6, 6, 3001)
    for centered in (False, True):
        p = IsotonicCalibrator(centered=centered).fit(s, y).predict(grid)
        assert np.all(np.diff(p) >= 0)
        assert p.min() >= 0.0 and p.max() <= 1.0
    # centered keeps more distinct values on the data than the step function
    plain = np.unique(IsotonicCalibrator().fit(s, y).predict(s)).size
    centered = np.unique(IsotonicCalibrator(centered=True).fit(s, y).predict(s)).size
    assert centered > plain


def test_fit_errors():
    with pytest.raises(DataError, match="one class only"):
        IsotonicCalibrator().fit([1, 2, 3], [1, 1, 1])
    with pytest.raises(DataError, match="2 of 4 scores are NaN"):
        IsotonicCalibrator().fit([1, float("nan"), 3, float("nan")], [1, 0, 1, 0])
    with pytest.raises(DataError, match="labels"):
        IsotonicCalibrator().fit([1, 2], [0, 2])
    with pytest.raises(RuntimeError, match="not fitted"):
        IsotonicCalibrator().predict([0.5])


def test_predict_passes_nan_through():
    p = IsotonicCalibrator().fit(S6, Y6).predict([float("nan"), 3.0])
    assert np.isnan(p[0]) and p[1] == pytest.approx(1 / 3)
