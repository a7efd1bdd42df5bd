"""Fitting calibrators on a calibration split, and out-of-fold predictions on that same split.

Scoring a calibration split with calibrators fitted on it is optimistic (a step function fitted to 500 labels
fits their noise). :func:`out_of_fold_predict` gives each example the prediction of a calibrator that never saw
it, so ranking and calibration metrics measured on the split are honest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.calibration.base import Calibrator, check_fit_inputs
from workbench.calibration.catalog import new_calibrator
from workbench.core.errors import ConfigError, DataError


def stratified_folds(labels: np.ndarray, n_folds: int, seed: int) -> np.ndarray:
    """Fold index (0..n_folds-1) per example, stratified on ``label > 0.5`` and deterministic by ``seed``.

    Each class's indices are shuffled with ``np.random.default_rng(seed)``; the shuffled negatives followed by
    the shuffled positives are dealt to the folds in turn (0, 1, ..., n_folds-1, 0, ...), so every fold gets
    the same share of each class to within one example and fold sizes differ by at most one.
    """
    rng = np.random.default_rng(seed)
    pos = labels > 0.5
    dealt = np.concatenate([rng.permutation(np.flatnonzero(~pos)), rng.permutation(np.flatnonzero(pos))])
    folds = np.empty(labels.size, dtype=int)
    folds[dealt] = np.arange(labels.size) % n_folds
    return folds


def fit_calibrator(kind: str, scores: Sequence[float], labels: Sequence[float], **kw: Any) -> Calibrator:
    """A calibrator of ``kind`` (a fixed kind of :mod:`~workbench.calibration.catalog`; options ``kw``) fitted on all
    of ``scores`` / ``labels``.

    Raises :class:`ConfigError` on an unknown kind and :class:`DataError` on NaN scores (naming the count),
    one-class labels or malformed data.
    """
    calibrator = new_calibrator(kind, **kw)
    return calibrator.fit(scores, labels)


def out_of_fold_predict(
    kind: str, scores: Sequence[float], labels: Sequence[float], n_folds: int = 5, seed: int = 0, **kw: Any
) -> np.ndarray:
    """Out-of-fold calibrated probabilities: example i gets the prediction of a calibrator of the fixed ``kind`` fitted
    without its fold.

    Folds come from :func:`stratified_folds` (stratified, deterministic by ``seed``). Each class needs at least
    two examples so that every training part has both classes. Raises :class:`ConfigError` when ``n_folds < 2``
    or the kind is unknown, :class:`DataError` on NaN scores, one-class labels or too few examples.
    """
    if isinstance(n_folds, bool) or not isinstance(n_folds, int) or n_folds < 2:
        raise ConfigError(f"n_folds must be an integer of at least 2, got {n_folds!r}", "n_folds")
    s, y = check_fit_inputs(scores, labels)
    new_calibrator(kind, **kw)  # fail on a bad kind or option before any fitting
    if s.size < n_folds:
        raise DataError(f"{s.size} examples cannot be split into {n_folds} folds", "calibration data")
    pos = y > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if min(n_pos, n_neg) < 2:
        raise DataError(
            f"out-of-fold calibration needs at least 2 examples of each class, got {n_pos} positive and "
            f"{n_neg} negative",
            "labels",
        )
    folds = stratified_folds(y, n_folds, seed)
    out = np.empty(s.size, dtype=float)
    for k in range(n_folds):
        test = folds == k
        if not test.any():
            continue
        calibrator = new_calibrator(kind, **kw).fit(s[~test], y[~test])
        out[test] = calibrator.predict(s[test])
    return out
