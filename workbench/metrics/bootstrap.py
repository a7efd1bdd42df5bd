"""Bootstrap confidence intervals over the questions: the workbench's one helper, on ``scipy.stats.bootstrap``.

Every interval the workbench reports comes from :func:`bootstrap_intervals`: BCa (bias-corrected and accelerated)
intervals from ``scipy.stats.bootstrap`` with :data:`N_RESAMPLES` resamples of the questions, seeded, at
:data:`LEVEL` (two-sided). The statistic is a function of an *index array* (the resampled questions), so every
figure it returns — several scorers, their differences, a ratio of means — is computed on the same resamples:
intervals of differences are paired.

**Degenerate resamples.** BCa needs the statistic on every resample and on every leave-one-out (jackknife) sample;
an AUROC is NaN on a resample holding one class only, and BCa is undefined when the resamples do not vary (a
constant statistic). For each figure:

- its value on all the questions is NaN, or there are fewer than two questions → no interval: ``(nan, nan)``,
  method ``"none"``;
- every resample is finite and scipy's BCa bounds are finite → the BCa interval, method ``"BCa"``;
- otherwise → the percentile interval of the finite resamples, method ``"percentile"``, provided at least
  ``min_defined`` (default half) of the resamples are finite; else ``(nan, nan)``, method ``"none"``.

scipy is imported inside :func:`bootstrap_intervals` (training and report code only; the runtime reports no
intervals).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

N_RESAMPLES = 2000
"""Default number of bootstrap resamples."""
LEVEL = 0.9
"""Default two-sided confidence level."""
METHODS = ("BCa", "percentile", "none")


@dataclass(frozen=True)
class Interval:
    """A confidence interval and how it was made (``method``: one of :data:`METHODS`; ``none``: NaN bounds)."""

    low: float
    high: float
    method: str

    def as_tuple(self) -> tuple[float, float]:
        """``(low, high)``."""
        return self.low, self.high

    def as_bounds(self) -> list[float | None]:
        """``[low, high]`` for a JSON record; ``[None, None]`` when either end is not finite (no interval)."""
        finite = math.isfinite(self.low) and math.isfinite(self.high)
        return [self.low, self.high] if finite else [None, None]


NO_INTERVAL = Interval(math.nan, math.nan, "none")


def describe(n_resamples: int = N_RESAMPLES, level: float = LEVEL) -> str:
    """How the intervals are made, for report text: e.g. ``"90% BCa bootstrap intervals (2,000 resamples of the
    questions)"``."""
    return f"{round(100 * level)}% BCa bootstrap intervals ({n_resamples:,} resamples of the questions)"


def bootstrap_intervals(
    statistic: Callable[[np.ndarray], float | Sequence[float] | np.ndarray],
    n: int,
    *,
    n_resamples: int = N_RESAMPLES,
    level: float = LEVEL,
    seed: int = 0,
    min_defined: float = 0.5,
    vectorized: bool = False,
) -> list[Interval]:
    """BCa intervals of every figure ``statistic`` returns, over ``n_resamples`` resamples of ``n`` questions.

    ``statistic(idx)`` takes an integer array of question indices (``arange(n)`` for the full sample, a resample
    with repetitions otherwise) and returns one float or a 1-D array of k floats; the same resamples serve every
    figure. ``vectorized=True``: ``idx`` has shape ``(..., n)`` (one resample per row, the last axis the questions)
    and the statistic returns shape ``(k, ...)``, or ``(...)`` for one figure — scipy then calls it once per batch.
    ``seed`` fixes the resamples (same ``seed``, ``n`` and ``n_resamples``: same resamples, across calls and
    whether vectorized or not). Degenerate figures: see the module docstring. Returns one :class:`Interval` per
    figure.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be positive, got {n_resamples}")

    def values(idx: np.ndarray) -> np.ndarray:
        return np.atleast_1d(np.asarray(statistic(np.asarray(idx, dtype=np.intp)), dtype=float)).reshape(-1)

    if n < 2:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                k = values(np.arange(max(n, 0))).size
        except (ValueError, IndexError, ZeroDivisionError):
            k = 1
        return [NO_INTERVAL] * k
    point = values(np.arange(n))
    from scipy.stats import bootstrap

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate figures are handled below, one by one

        def batch(idx: np.ndarray, axis: int = -1) -> np.ndarray:
            return np.asarray(statistic(np.asarray(idx, dtype=np.intp)), dtype=float)

        result = bootstrap(
            (np.arange(n),),
            batch if vectorized else (lambda idx: values(idx) if point.size > 1 else values(idx)[0]),
            n_resamples=n_resamples,
            vectorized=vectorized,
            confidence_level=level,
            method="BCa",
            rng=np.random.default_rng(seed),
        )
    distribution = np.asarray(result.bootstrap_distribution, dtype=float).reshape(point.size, -1)
    lows = np.atleast_1d(np.asarray(result.confidence_interval.low, dtype=float))
    highs = np.atleast_1d(np.asarray(result.confidence_interval.high, dtype=float))
    tail = (1.0 - level) / 2.0
    out: list[Interval] = []
    for j in range(point.size):
        draws = distribution[j]
        finite = draws[np.isfinite(draws)]
        if not math.isfinite(point[j]):
            out.append(NO_INTERVAL)
        elif finite.size == draws.size and math.isfinite(lows[j]) and math.isfinite(highs[j]):
            out.append(Interval(float(lows[j]), float(highs[j]), "BCa"))
        elif finite.size and finite.size >= min_defined * draws.size:
            low, high = np.quantile(finite, [tail, 1.0 - tail])
            out.append(Interval(float(low), float(high), "percentile"))
        else:
            out.append(NO_INTERVAL)
    return out


def bootstrap_interval(
    statistic: Callable[[np.ndarray], float],
    n: int,
    *,
    n_resamples: int = N_RESAMPLES,
    level: float = LEVEL,
    seed: int = 0,
    min_defined: float = 0.5,
    vectorized: bool = False,
) -> Interval:
    """:func:`bootstrap_intervals` for a statistic returning one float."""
    return bootstrap_intervals(
        statistic, n, n_resamples=n_resamples, level=level, seed=seed, min_defined=min_defined, vectorized=vectorized
    )[0]


def mean_interval(
    values: Sequence[float], *, n_resamples: int = N_RESAMPLES, level: float = LEVEL, seed: int = 0
) -> Interval:
    """The BCa interval of the mean of ``values`` (one per question); NaN values make it ``none``."""
    return mean_intervals(
        np.asarray(values, dtype=float).reshape(1, -1), n_resamples=n_resamples, level=level, seed=seed
    )[0]


def mean_intervals(
    values: np.ndarray, *, n_resamples: int = N_RESAMPLES, level: float = LEVEL, seed: int = 0
) -> list[Interval]:
    """The BCa interval of the mean of each row of ``values`` (shape ``(k, n)``: k figures, one value per question
    each), every row on the same resamples of the n questions (paired); ``[]`` for k = 0."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"values must be a (figures, questions) matrix, got shape {x.shape}")
    if x.shape[0] == 0:
        return []
    return bootstrap_intervals(
        lambda idx: x[:, idx].mean(axis=-1),
        x.shape[1],
        n_resamples=n_resamples,
        level=level,
        seed=seed,
        vectorized=True,
    )
