"""Isotonic and centered isotonic calibrators: hand-made PAV cases, clipping, monotonicity, sklearn agreement
(including scores stored a few ulps apart)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

from workbench.calibration import IsotonicCalibrator
from workbench.calibration.isotonic import MERGE_EPS, isotonic_blocks, merge_close_scores
from workbench.core.errors import DataError

# scores 1..6 with labels 0, 1, 0, 0, 1, 1
S6 = [1, 2, 3, 4, 5, 6]
Y6 = [0, 1, 0, 0, 1, 1]


def test_isotonic_blocks_hand_computed():
    # PAV: 0 | 1 | 0 → 1 ≥ 0 pools {2, 3} = 1/2; 1/2 ≥ 0 (score 4) pools {2, 3, 4} = 1/3; 0 ≤ 1/3 stays
    # then 1, 1 (scores 5, 6): equal values pool into {5, 6} = 1
    blocks = isotonic_blocks(np.array(S6, dtype=float), np.array(Y6, dtype=float))
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


def _sklearn(s: np.ndarray, y: np.ndarray) -> IsotonicRegression:
    return IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(s, y)


def _agree(s: np.ndarray, y: np.ndarray, new: np.ndarray) -> None:
    """The calibrator's predictions equal sklearn's on the fit scores and on ``new`` (max |Δ| ≤ 1e-12)."""
    ref = _sklearn(s, y)
    ours = IsotonicCalibrator().fit(s, y)
    np.testing.assert_allclose(ours.predict(s), ref.predict(s), rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours.predict(new), ref.predict(new), rtol=0, atol=1e-12)
    # the JSON round trip keeps them
    again = IsotonicCalibrator.from_dict(ours.to_dict())
    np.testing.assert_array_equal(again.predict(new), ours.predict(new))


def test_isotonic_matches_sklearn_on_random_data():
    rng = np.random.default_rng(7)
    grid = np.linspace(-5, 5, 2001)
    for trial in range(30):
        n = int(rng.integers(10, 400))
        s = rng.normal(size=n)
        if trial % 2:
            s = np.round(s, 1)  # with repeated scores
        y = (rng.random(n) < 1 / (1 + np.exp(-2 * s))).astype(float)
        if y.min() == y.max():
            continue
        _agree(s, y, np.r_[grid, rng.normal(size=200)])


def test_isotonic_matches_sklearn_on_scores_a_few_ulps_apart():
    # graph features: the same value computed along two paths, stored a few ulps apart, with opposite labels;
    # sklearn merges them into one score (mean label), so must we — no step between them
    rng = np.random.default_rng(3)
    base = np.round(rng.uniform(0.05, 0.95, size=12), 3)
    s = np.concatenate([base, np.nextafter(base, 2.0), np.nextafter(np.nextafter(base, 2.0), 2.0), base - 2e-16])
    y = (rng.random(s.size) < s).astype(float)
    y[: base.size] = 1.0
    y[base.size : 2 * base.size] = 0.0
    _agree(s, y, np.r_[s, np.linspace(0, 1, 501), base + 1e-16])
    x, _, w = merge_close_scores(s, y)
    assert x.size == base.size and w.sum() == s.size  # one group per base value
    cal = IsotonicCalibrator().fit(s, y)
    assert np.all(np.diff(cal.to_dict()["x"]) >= MERGE_EPS)
    # the centered variant sees the same merged scores: one block value per base value at most
    cir = IsotonicCalibrator(centered=True).fit(s, y)
    assert len(cir.to_dict()["x"]) <= base.size + 2


def test_merge_close_scores_mirrors_sklearn_thresholds():
    # plain breakpoints rebuilt from our blocks (first and last merged score of each) are sklearn's thresholds,
    # so the centered variant starts from the same merge and the same PAV as the plain one
    rng = np.random.default_rng(5)
    for _ in range(10):
        base = rng.normal(size=40)
        s = np.concatenate([base, base + rng.integers(-3, 4, 40) * np.spacing(base)])
        y = (rng.random(s.size) < 0.5).astype(float)
        blocks = isotonic_blocks(s, y)
        xs = [x for b in blocks for x in ((b.x_first,) if b.x_first == b.x_last else (b.x_first, b.x_last))]
        ys = [b.value for b in blocks for _ in ((0,) if b.x_first == b.x_last else (0, 1))]
        ref = _sklearn(s, y)
        np.testing.assert_array_equal(xs, ref.X_thresholds_)
        np.testing.assert_allclose(ys, ref.y_thresholds_, rtol=0, atol=1e-15)


def test_fit_imports_sklearn_but_predict_from_json_does_not():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from workbench.calibration.isotonic import IsotonicCalibrator\n"
        "c = IsotonicCalibrator.from_dict({'kind': 'isotonic', 'version': 1, 'x': [0.0, 1.0], 'y': [0.2, 0.8]})\n"
        "assert abs(c.predict([0.5])[0] - 0.5) < 1e-12\n"
        "assert 'sklearn' not in sys.modules, 'sklearn imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


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
