"""Wilson score intervals of a rate: the textbook formula at 90 %, honest at 0 and n, None without questions."""

from __future__ import annotations

import math

import pytest

from workbench.metrics.proportion import wilson_interval


def _wilson(k: int, n: int, z: float = 1.6448536269514722) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


@pytest.mark.parametrize(("k", "n"), [(5, 100), (31, 500), (224, 500), (0, 1000), (40, 40)])
def test_the_interval_is_wilsons_at_90_percent(k, n):
    low, high = wilson_interval(k, n)
    assert (low, high) == pytest.approx(_wilson(k, n), abs=1e-9)
    assert low <= k / n <= high


def test_edges_and_bad_counts():
    assert wilson_interval(0, 1000)[0] == pytest.approx(0.0, abs=1e-12) and wilson_interval(0, 1000)[1] < 0.003
    assert wilson_interval(40, 40)[1] == pytest.approx(1.0) and wilson_interval(40, 40)[0] > 0.93
    assert wilson_interval(0, 0) is None
    low95, high95 = wilson_interval(5, 100, level=0.95)
    low90, high90 = wilson_interval(5, 100)
    assert low95 < low90 and high95 > high90
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(11, 10)
