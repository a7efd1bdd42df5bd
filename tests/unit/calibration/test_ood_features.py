"""The detector on the uncertainty features (measured beside the OOD flag): its cross-fitted threshold hits the target
on fresh in-distribution rows, a shift of the features is detected, a shift they do not show is not, and its record
round-trips."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.calibration.ood_features import FeatureNovelty
from workbench.core.errors import DataError


def _rows(rng: np.random.Generator, n: int, shift: float = 0.0) -> np.ndarray:
    """Three correlated features with a heavy-tailed one, moved by ``shift`` standard deviations."""
    base = rng.normal(size=(n, 3))
    base[:, 1] += 0.6 * base[:, 0]
    base[:, 2] = rng.standard_t(5, n)
    return base + shift


def test_the_cross_fitted_threshold_hits_the_target_and_a_shift_is_detected():
    rng = np.random.default_rng(0)
    detector = FeatureNovelty.fit(_rows(rng, 400), neighbours=10, target_fpr=0.05)
    fresh = np.mean([bool(c) for c in detector.checks(_rows(rng, 4000))])
    assert abs(fresh - 0.05) < 0.025
    assert np.mean([bool(c) for c in detector.checks(_rows(rng, 400, shift=3.0))]) > 0.9
    assert detector.checks(np.array([[0.0, 0.0, 0.0], [50.0, 0.0, 0.0]])) == [[], ["features"]]


def test_it_survives_a_json_round_trip_and_refuses_what_it_cannot_fit():
    rng = np.random.default_rng(1)
    detector = FeatureNovelty.fit(_rows(rng, 60), neighbours=100, target_fpr=0.1)
    assert detector.neighbours == 59  # capped at rows − 1
    again = FeatureNovelty.from_dict(detector.to_dict())
    rows = _rows(rng, 50, shift=1.0)
    assert again.checks(rows) == detector.checks(rows)
    constant = np.ones((30, 2))  # no spread at all: scale 1, every fresh row at the reference is inside
    assert FeatureNovelty.fit(constant, 5, 0.05).checks(constant[:3]) == [[], [], []]
    with pytest.raises(DataError, match="finite"):
        FeatureNovelty.fit(np.array([[np.nan, 1.0], [0.0, 1.0]]), 5, 0.05)
    with pytest.raises(DataError, match="at least 19"):
        FeatureNovelty.fit(_rows(rng, 10), 3, 0.05)
