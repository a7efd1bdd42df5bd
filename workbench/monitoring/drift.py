"""The drift of a window of answers against a bundle's reference: PSI (the alarm) and KS (reported), per series.

**PSI** (population stability index) of a window against the reference's bins: ``Σ (w_i − r_i) ln(w_i / r_i)`` over
the bins, each share smoothed with half a count per bin (an empty bin would make it infinite). **The alarm**: a series
with at least ``min_count`` answers in the window alarms when its PSI exceeds both ``psi_alarm`` and
:func:`psi_critical` — the value sampling alone exceeds with probability ``alpha / series`` when nothing drifted
(PSI ≈ χ²(bins − 1) · (1/n + 1/N) under no drift: Yurdakul, *Statistical properties of the population stability
index*, 2018). The second bound keeps a small window or a small reference from alarming on noise; the first keeps a
huge window from alarming on a shift too small to matter. **KS**: the two-sample Kolmogorov–Smirnov distance and
p-value (:func:`scipy.stats.ks_2samp`) between the window and the reference's sample, reported beside PSI.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from workbench.monitoring.reference import (
    BINARY_EDGES,
    FINITE_MAX,
    DriftReference,
    SeriesReference,
    for_ks,
)
from workbench.monitoring.settings import DriftSettings

PSEUDO_COUNT = 0.5
"""Added to every bin's count on both sides before PSI's logarithm."""


@dataclass(frozen=True)
class SeriesDrift:
    """One series' drift in one window: ``count`` answers with a value (``missing`` without), the window's mean and
    the reference's, ``psi`` and the ``threshold`` it is held to (max of ``psi_alarm`` and :func:`psi_critical`),
    ``ks`` / ``ks_pvalue``, and ``status``: ``too_few`` (under ``min_count``: never alarms), ``ok``, ``warn``
    (PSI over ``psi_warn``) or ``alarm``."""

    series: str
    count: int
    missing: int
    mean: float | None
    reference_mean: float | None
    psi: float | None
    threshold: float
    ks: float | None
    ks_pvalue: float | None
    status: str

    @property
    def alarm(self) -> bool:
        """Whether the series alarms in this window."""
        return self.status == "alarm"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``alarm`` included)."""
        return {**asdict(self), "alarm": self.alarm}


def bin_counts(reference: SeriesReference, values: np.ndarray) -> np.ndarray:
    """How many of ``values`` (no NaN) fall in each of the reference's bins."""
    return np.bincount(np.searchsorted(np.asarray(reference.edges), values, side="right"), minlength=reference.bins)


def psi(reference: SeriesReference, values: Any) -> float | None:
    """PSI of ``values`` (NaN ignored) against ``reference`` (see the module docstring); None without a value."""
    x = np.asarray(values, dtype=float).reshape(-1)
    x = x[~np.isnan(x)]
    if x.size == 0:
        return None
    window = (bin_counts(reference, x) + PSEUDO_COUNT) / (x.size + PSEUDO_COUNT * reference.bins)
    counts = np.asarray(reference.proportions) * reference.n
    expected = (counts + PSEUDO_COUNT) / (reference.n + PSEUDO_COUNT * reference.bins)
    return float(np.sum((window - expected) * np.log(window / expected)))


def psi_critical(reference_n: int, window_n: int, bins: int, alpha: float) -> float:
    """The PSI that sampling alone exceeds with probability ``alpha`` when window and reference share a distribution:
    the χ²(bins − 1) quantile scaled by ``1/window_n + 1/reference_n`` (0 for a single bin, whose PSI is 0)."""
    from scipy.stats import chi2

    if bins < 2 or window_n < 1 or reference_n < 1:
        return 0.0
    return float(chi2.ppf(1.0 - alpha, bins - 1) * (1.0 / window_n + 1.0 / reference_n))


def series_drift(
    reference: SeriesReference, values: Any, settings: DriftSettings, series_count: int = 1
) -> SeriesDrift:
    """The drift of one series' window ``values`` (NaN: missing) against its ``reference``; its level is
    ``settings.alpha / series_count`` (the window's false-alarm level split over its series)."""
    from scipy.stats import ks_2samp

    x = np.asarray(values, dtype=float).reshape(-1)
    present = x[~np.isnan(x)]
    n = int(present.size)
    value = psi(reference, present)
    critical = psi_critical(reference.n, n, reference.bins, settings.alpha / max(series_count, 1))
    threshold = max(settings.psi_alarm, critical)
    ks = pvalue = None
    if n:
        result = ks_2samp(for_ks(present), np.asarray(reference.sample), method="asymp")
        ks, pvalue = float(result.statistic), float(result.pvalue)
    if n < settings.min_count or value is None:
        status = "too_few"
    elif value > threshold:
        status = "alarm"
    else:
        status = "warn" if value > settings.psi_warn else "ok"
    return SeriesDrift(
        reference.name,
        n,
        int(x.size - n),
        _mean(present),
        reference_mean(reference),
        value,
        threshold,
        ks,
        pvalue,
        status,
    )


def _mean(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else None


def window_drift(reference: DriftReference, window: Mapping[str, Sequence[float]]) -> dict[str, SeriesDrift]:
    """Every reference series' drift over ``window`` (series name → values, NaN for an answer without one); a series
    the window lacks counts as empty."""
    count = len(reference.series)
    return {
        name: series_drift(ref, window.get(name, ()), reference.settings, count)
        for name, ref in reference.series.items()
    }


def reference_mean(reference: SeriesReference) -> float | None:
    """The reference's mean: a binary series' share of 'yes' (its second bin), a continuous one's mean over its
    sample's finite values (None when it has none)."""
    if reference.edges == BINARY_EDGES:
        return float(reference.proportions[1])
    sample = np.asarray(reference.sample)
    return _mean(sample[np.abs(sample) < FINITE_MAX])
