"""Selective-prediction metrics: how well a confidence score orders examples by quality.

Every function takes ``confidence`` oriented "higher = more certain" and a per-example quality or correctness
(higher = better). Pairs where either value is NaN are dropped; arrays of unequal length raise ``ValueError``;
a metric that is undefined on what remains (too few examples, constant quality) returns ``nan``.

The curves sort the examples by confidence, most confident first. Examples with equal confidence form a tie
block, whose internal order is arbitrary. ``ties="average"`` (the default) gives every member of a block the
block's mean quality, which is exactly the expected curve over a uniformly random order inside each block (every
curve here is linear in the per-position qualities), so the result does not depend on the input order.
``ties="argsort"`` takes the order of ``np.argsort(-confidence)`` (numpy's default, unstable sort) as LM-Polygraph
and the DENSE code do, to reproduce their numbers bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_TIES = ("average", "argsort")


def _paired(a: Sequence[float], b: Sequence[float], a_name: str, b_name: str) -> tuple[np.ndarray, np.ndarray]:
    """Two 1-D float arrays of equal length with every pair holding a NaN dropped."""
    x = np.asarray(a, dtype=float).reshape(-1)
    y = np.asarray(b, dtype=float).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"{x.size} {a_name} values but {y.size} {b_name} values: the two must have equal length")
    keep = ~np.isnan(x) & ~np.isnan(y)
    return x[keep], y[keep]


def _blocks(sorted_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start index and length of each run of equal values in a sorted array."""
    n = sorted_values.size
    if n == 0:
        return np.zeros(0, dtype=int), np.zeros(0, dtype=int)
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    return starts, np.diff(np.r_[starts, n])


def _by_confidence(confidence: np.ndarray, quality: np.ndarray, ties: str) -> np.ndarray:
    """Quality per position, most confident first, with tie blocks resolved by ``ties``."""
    if ties not in _TIES:
        raise ValueError(f"ties must be one of {_TIES}, got {ties!r}")
    if ties == "argsort":
        return quality[np.argsort(-confidence)]
    order = np.argsort(-confidence, kind="stable")
    q = quality[order]
    starts, counts = _blocks(-confidence[order])
    if starts.size == q.size:
        return q
    return np.repeat(np.add.reduceat(q, starts) / counts, counts)


def _top_k_means(q_sorted: np.ndarray) -> np.ndarray:
    """``m[k-1]`` = mean of the first k entries, k = 1..n."""
    return np.cumsum(q_sorted) / np.arange(1, q_sorted.size + 1)


def _rejection_area(q_sorted: np.ndarray, num_rej: int) -> float:
    """LM-Polygraph's area: mean over j = 0..num_rej-1 of the mean quality of the n - j most confident."""
    n = q_sorted.size
    return float(_top_k_means(q_sorted)[n - num_rej :].sum() / num_rej)


def _minmax(quality: np.ndarray) -> np.ndarray:
    """LM-Polygraph's target normalisation (q - min) / (max - min); the caller has excluded min ≈ max."""
    lo, hi = float(quality.min()), float(quality.max())
    return (quality - lo) / (hi - lo)


def rejection_curve(
    confidence: Sequence[float], quality: Sequence[float], *, ties: str = "average"
) -> tuple[np.ndarray, np.ndarray]:
    """The prediction-rejection curve: rejection rates and the mean quality of the examples kept.

    With n examples sorted by confidence (most confident first), the j-th point (j = 0..n-1) rejects the j least
    confident examples: ``rates[j] = j / n`` and ``kept[j] = mean(quality of the n - j most confident)``. The
    rate 1 (nothing kept) is left out, as in LM-Polygraph. ``quality`` is used as given (not normalised).
    Returns two empty arrays when no pair remains.
    """
    c, q = _paired(confidence, quality, "confidence", "quality")
    n = c.size
    if n == 0:
        return np.zeros(0), np.zeros(0)
    kept = _top_k_means(_by_confidence(c, q, ties))[::-1]
    return np.arange(n) / n, kept


def prr(
    confidence: Sequence[float],
    quality: Sequence[float],
    max_rejection: float = 1.0,
    *,
    ties: str = "average",
    n_permutations: int | None = None,
    seed: int = 42,
) -> float:
    """Prediction-rejection ratio, LM-Polygraph's ``PredictionRejectionArea`` normalised by its oracle and random.

    Definition (LM-Polygraph ``ue_metrics/pred_rej_area.py`` and ``normalize_metric``):

    1. The quality is min-max normalised: q̃ = (q - min q) / (max q - min q).
    2. Sort by confidence, most confident first; m_k = mean of q̃ over the k most confident, k = 1..n.
    3. With r = ``int(max_rejection * n)`` rejection steps, the area is a left Riemann sum over the rejection
       rates 0, 1/n, ..., (r-1)/n: ``A = (1/r) · Σ_{k=n-r+1..n} m_k`` (rejecting everything is not a point).
    4. ``A_oracle`` = A with the confidence replaced by q̃ itself; ``A_random`` = A of a uniformly random order.
    5. ``PRR = (A_unc - A_random) / (A_oracle - A_random)``: 1 for a perfect ranking, about 0 for a random one,
       negative when worse than random.

    ``A_random``: with ``n_permutations=None`` (the default) its exact expectation, ``mean(q̃)`` (every prefix
    mean of a random order has expectation ``mean(q̃)``); with an integer, LM-Polygraph's Monte-Carlo estimate:
    the mean of A over that many successive in-place shuffles of ``arange(n)`` (used as the uncertainty) drawn
    from ``np.random.RandomState(seed)``. Ties: see the module docstring. LM-Polygraph's own numbers are
    reproduced by ``ties="argsort", n_permutations=1000, seed=42``.

    Returns NaN when no pair remains, when ``r`` is 0, or when the quality is constant (``np.isclose(min q,
    max q)``, or ``A_oracle = A_random``), where LM-Polygraph would return the un-normalised area instead.
    """
    if not 0.0 < max_rejection <= 1.0:
        raise ValueError(f"max_rejection must be in (0, 1], got {max_rejection}")
    if n_permutations is not None and n_permutations < 1:
        raise ValueError(f"n_permutations must be a positive integer or None, got {n_permutations}")
    c, q = _paired(confidence, quality, "confidence", "quality")
    n = c.size
    num_rej = int(max_rejection * n)
    if n == 0 or num_rej == 0 or np.isclose(q.min(), q.max()):
        return float("nan")
    qn = _minmax(q)
    area_unc = _rejection_area(_by_confidence(c, qn, ties), num_rej)
    area_oracle = _rejection_area(np.sort(qn)[::-1], num_rej)
    if n_permutations is None:
        area_random = float(qn.mean())
    else:
        rng = np.random.RandomState(seed)
        ranks = np.arange(n)
        areas = []
        for _ in range(n_permutations):
            rng.shuffle(ranks)
            areas.append(_rejection_area(qn[np.argsort(ranks)], num_rej))
        area_random = float(np.mean(areas))
    if area_oracle == area_random:
        return float("nan")
    return float((area_unc - area_random) / (area_oracle - area_random))


def aurac(confidence: Sequence[float], correct: Sequence[float], *, ties: str = "average") -> float:
    """Area under the accuracy-rejection curve as DENSE defines it (Lin et al. style; spec seed-000 §9.5).

    Sort by confidence, most confident first; a_k = mean correctness of the k most confident, k = 1..N.
    AURAC = trapezoid area of a_k plotted against x = linspace(0, 1, N):
    ``(1 / (N - 1)) · Σ_{k=1..N-1} (a_k + a_{k+1}) / 2``. In [0, 1] for 0/1 correctness (the paper reports
    × 100). Returns NaN with fewer than two pairs. Ties: see the module docstring.
    """
    c, y = _paired(confidence, correct, "confidence", "correct")
    n = c.size
    if n < 2:
        return float("nan")
    acc = _top_k_means(_by_confidence(c, y, ties))
    return float(((acc[:-1] + acc[1:]) / 2.0).sum() / (n - 1))


def risk_coverage_curve(
    confidence: Sequence[float], correct: Sequence[float], *, ties: str = "average"
) -> tuple[np.ndarray, np.ndarray]:
    """Risk-coverage curve: ``coverage[k-1] = k / n`` and ``risk[k-1] = 1 - mean(correct of the k most confident)``.

    k = 1..n, most confident first (so coverage runs from 1/n up to 1). Returns two empty arrays when no pair
    remains. Ties: see the module docstring.
    """
    c, y = _paired(confidence, correct, "confidence", "correct")
    n = c.size
    if n == 0:
        return np.zeros(0), np.zeros(0)
    risk = 1.0 - _top_k_means(_by_confidence(c, y, ties))
    return np.arange(1, n + 1) / n, risk


def aurc(confidence: Sequence[float], correct: Sequence[float], *, ties: str = "average") -> float:
    """Area under the risk-coverage curve (lower is better): ``AURC = (1/n) · Σ_{k=1..n} risk_k``.

    A right Riemann sum over the coverage grid k/n, as in Geifman et al. (2019) and LM-Polygraph's ``rcc-auc``
    (which also min-max normalises the target; here ``correct`` is used as given). Returns NaN when no pair
    remains. Ties: see the module docstring.
    """
    _, risk = risk_coverage_curve(confidence, correct, ties=ties)
    return float(risk.mean()) if risk.size else float("nan")


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation, ``scipy.stats.spearmanr`` (ties take average ranks), NaN pairs dropped first.

    The Pearson correlation of the average ranks of ``x`` and ``y``. Returns NaN with fewer than two pairs or when
    either side is constant (scipy's ``ConstantInputWarning`` is silenced: NaN says it). scipy is imported inside
    the function, so this module stays numpy-only at import.
    """
    a, b = _paired(x, y, "x", "y")
    if a.size < 2 or a.min() == a.max() or b.min() == b.max():
        return float("nan")
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)
