"""Confidence intervals of a proportion (a flag rate, a detection rate): Wilson score intervals from scipy.

A rate over ``n`` questions is a binomial proportion; the bootstrap (:mod:`workbench.metrics.bootstrap`) gives it a
degenerate interval at 0 or ``n`` successes (every resample agrees), where the Wilson score interval stays honest:
0 of 1,000 flagged is ``[0, 0.27 %]`` at 90 %, not ``[0, 0]``. scipy is imported when an interval is asked for.
"""

from __future__ import annotations

from workbench.metrics.bootstrap import LEVEL


def wilson_interval(successes: int, n: int, level: float = LEVEL) -> tuple[float, float] | None:
    """The two-sided ``level`` Wilson score interval of ``successes`` out of ``n`` (None when ``n`` is 0); ValueError
    when ``successes`` is not in ``[0, n]``."""
    if n == 0:
        return None
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}], got {successes}")
    from scipy.stats import binomtest

    interval = binomtest(int(successes), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return float(interval.low), float(interval.high)
