"""The bootstrap helper: agreement with scipy.stats.bootstrap (BCa), seeded determinism, paired figures, and the
documented fallbacks for degenerate resamples."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import bootstrap
from sklearn.metrics import roc_auc_score

from workbench.metrics.bootstrap import (
    LEVEL,
    N_RESAMPLES,
    bootstrap_interval,
    bootstrap_intervals,
    describe,
    mean_interval,
    mean_intervals,
)
from workbench.metrics.ranking import auroc, auroc_rows


def _scipy(data: tuple[np.ndarray, ...], statistic, *, paired: bool = False, n_resamples: int = N_RESAMPLES, seed=0):
    return bootstrap(
        data,
        statistic,
        n_resamples=n_resamples,
        paired=paired,
        vectorized=False,
        confidence_level=LEVEL,
        method="BCa",
        rng=np.random.default_rng(seed),
    ).confidence_interval


def test_defaults_are_bca_with_2000_resamples_at_90_percent():
    assert N_RESAMPLES >= 2000 and LEVEL == 0.9
    assert describe() == "90% BCa bootstrap intervals (2,000 resamples of the questions)"


def test_mean_interval_is_scipys_bca_interval():
    x = np.random.default_rng(1).exponential(size=80)
    got = mean_interval(x, seed=3)
    ref = _scipy((x,), np.mean, seed=3)
    assert got.method == "BCa"
    assert got.as_tuple() == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_auroc_interval_is_scipys_paired_bca_interval():
    rng = np.random.default_rng(2)
    y = (rng.random(60) < 0.5).astype(float)
    s = y * 0.8 + rng.normal(size=60)
    got = bootstrap_interval(lambda idx: auroc(s[idx], y[idx]), 60, n_resamples=150, seed=5)
    ref = _scipy((s, y), lambda a, b: roc_auc_score(b, a), paired=True, n_resamples=150, seed=5)
    assert got.method == "BCa"
    assert got.as_tuple() == pytest.approx((ref.low, ref.high), abs=1e-12)
    assert got.low < auroc(s, y) < got.high


def test_seeded_and_paired_across_figures_and_calls():
    x = np.random.default_rng(4).normal(size=50)
    a = mean_interval(x, n_resamples=500, seed=7)
    assert mean_interval(x, n_resamples=500, seed=7) == a
    assert mean_interval(x, n_resamples=500, seed=8) != a
    # a vector statistic: every figure on the same resamples, so each equals its own call with the same seed
    both = bootstrap_intervals(lambda idx: [x[idx].mean(), np.median(x[idx])], x.size, n_resamples=500, seed=7)
    median = bootstrap_interval(lambda idx: float(np.median(x[idx])), x.size, n_resamples=500, seed=7)
    assert both[0].as_tuple() == pytest.approx(a.as_tuple(), abs=1e-12)
    assert both[1].as_tuple() == pytest.approx(median.as_tuple(), abs=1e-12)


def test_one_class_resamples_fall_back_to_the_percentile_interval_of_the_defined_ones():
    # one positive in 30: every resample without it (about 1/e of them) and the jackknife sample leaving it out
    # have an undefined AUROC, so BCa is undefined; the percentile interval of the defined resamples is used
    rng = np.random.default_rng(0)
    s = rng.normal(size=30)
    y = np.zeros(30)
    y[0] = 1.0

    def stat(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        return auroc_rows(s[idx], y[idx])

    got = bootstrap_interval(stat, 30, n_resamples=400, seed=1, vectorized=True)
    assert got.method == "percentile"
    draws = bootstrap((np.arange(30),), stat, n_resamples=400, vectorized=True, rng=np.random.default_rng(1))
    dist = draws.bootstrap_distribution
    finite = dist[np.isfinite(dist)]
    assert 0.5 * dist.size <= finite.size < dist.size
    assert got.as_tuple() == pytest.approx(tuple(np.quantile(finite, [0.05, 0.95])))
    # defined on fewer than half the resamples (or fewer than asked): no interval
    assert bootstrap_interval(stat, 30, n_resamples=400, seed=1, min_defined=0.99, vectorized=True).method == "none"


def test_constant_figures_nan_figures_and_tiny_samples():
    # a statistic constant over the resamples: BCa is undefined (no spread), the interval is the value twice
    same = bootstrap_intervals(lambda idx: [0.0, float(np.mean(idx >= 0))], 40, n_resamples=200)
    assert [i.as_tuple() for i in same] == [(0.0, 0.0), (1.0, 1.0)] and {i.method for i in same} == {"percentile"}
    # undefined on the whole sample (one class): no interval, the other figure unaffected
    y = np.ones(20)
    got = bootstrap_intervals(lambda idx: [auroc(idx, y[idx]), float(np.mean(idx))], 20, n_resamples=200)
    assert got[0].method == "none" and math.isnan(got[0].low) and math.isnan(got[0].high)
    assert got[1].method == "BCa"
    # fewer than two questions: no interval, one per figure
    assert mean_interval([]).method == "none" and mean_interval([3.0]).method == "none"
    assert len(bootstrap_intervals(lambda idx: [1.0, 2.0], 1)) == 2
    with pytest.raises(ValueError, match="level"):
        mean_interval([1.0, 2.0], level=1.5)


def test_stage_wrappers_use_the_helper():
    from workbench.reports.auroc import bootstrap_auroc
    from workbench.routing.front import bootstrap_interval as front_interval
    from workbench.stages.seper_eval.run import bootstrap_mean_interval

    rng = np.random.default_rng(9)
    x = rng.normal(size=40)
    assert bootstrap_mean_interval(list(x), seed=2) == mean_interval(x, seed=2).as_tuple()
    assert front_interval(x, draws=300, seed=2) == mean_interval(x, n_resamples=300, seed=2).as_tuple()
    y = (x + rng.normal(size=40) > 0).astype(float)
    expected = bootstrap_interval(lambda idx: auroc(x[idx], y[idx]), 40, n_resamples=200, seed=1).as_tuple()
    assert bootstrap_auroc(list(x), list(y), draws=200, seed=1) == pytest.approx(expected, abs=1e-12)


def test_a_vectorized_statistic_gives_the_same_intervals_faster():
    rng = np.random.default_rng(6)
    y = (rng.random(50) < 0.3).astype(float)
    s = np.round(y + rng.normal(size=50), 1)
    s[:3] = np.nan
    one = bootstrap_interval(lambda idx: auroc(s[idx], y[idx]), 50, n_resamples=300, seed=4)
    many = bootstrap_interval(lambda idx: auroc_rows(s[idx], y[idx]), 50, n_resamples=300, seed=4, vectorized=True)
    assert one.method == many.method
    assert many.as_tuple() == pytest.approx(one.as_tuple(), abs=1e-12)


def test_mean_intervals_are_each_rows_interval_on_shared_resamples():
    rng = np.random.default_rng(4)
    a, b = rng.normal(0, 1, 30), rng.normal(2, 1, 30)
    both = mean_intervals(np.stack([a, b]), n_resamples=300, seed=5)
    for row, interval in zip((a, b), both, strict=True):
        alone = mean_interval(row, n_resamples=300, seed=5)
        assert interval.method == "BCa" and np.allclose(interval.as_tuple(), alone.as_tuple())
    assert mean_intervals(np.empty((0, 30))) == []
    with pytest.raises(ValueError, match="matrix"):
        mean_intervals(a)
    assert mean_interval([1.0], n_resamples=10).as_bounds() == [None, None]
    assert both[1].as_bounds() == [both[1].low, both[1].high]
