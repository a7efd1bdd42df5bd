"""Fitting the LARS-style scorer on collected answers, out of fold, so the ``lars`` feature never sees its own label.

LARS (Yaldiz et al. 2024) is a learned scorer; the published one is a trained transformer that is not available
offline, so the workbench fits :class:`~workbench.uncertainty.features.probability.LarsLikeScorer` on the greedy
answers' token log-probs and their closed-book correctness (``correct_contains``) of the **fit split** (the
calibration split by default):

* rows of the fit split get a K-fold cross-fitted score: each fold is scored by a scorer fitted on the other folds
  (folds stratified by label, deterministic by seed: :func:`workbench.calibration.oof.stratified_folds`) — an
  honest feature for fitting calibrators on that split;
* rows of every other split get the score of one scorer fitted on the whole fit split, which is also the scorer
  saved with the collection (``lars_scorer.json``) for the runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.calibration.oof import stratified_folds
from workbench.core.errors import DataError
from workbench.uncertainty.features.probability import LarsLikeScorer


def cross_fit_lars(
    fit_logprobs: Sequence[Sequence[float]],
    fit_labels: Sequence[float],
    others: dict[str, Sequence[Sequence[float]]],
    *,
    n_folds: int = 5,
    seed: int = 0,
    l2: float = 1.0,
) -> tuple[np.ndarray, dict[str, np.ndarray], Any]:
    """``(out-of-fold scores of the fit split, {split: scores}, scorer fitted on the whole fit split)``.

    Raises :class:`DataError` when the fit split has fewer than two examples of either class (a fold's scorer
    could not be fitted); ``n_folds`` is lowered to the minority-class count when that is smaller.
    """

    y = (np.asarray(fit_labels, dtype=float) > 0.5).astype(float)
    minority = int(min(y.sum(), y.size - y.sum()))
    if minority < 2:
        raise DataError(
            f"LARS needs at least 2 correct and 2 wrong answers in the fit split (has {int(y.sum())} correct of "
            f"{y.size})",
            "collect.lars",
        )
    n_folds = max(2, min(n_folds, minority))
    folds = stratified_folds(y, n_folds, seed)
    oof = np.empty(y.size, dtype=float)
    for fold in range(n_folds):
        train = np.flatnonzero(folds != fold)
        test = np.flatnonzero(folds == fold)
        scorer = LarsLikeScorer(l2=l2).fit([fit_logprobs[i] for i in train], y[train])
        oof[test] = scorer.predict_many([fit_logprobs[i] for i in test])
    full = LarsLikeScorer(l2=l2).fit(list(fit_logprobs), y)
    scores = {name: full.predict_many(list(rows)) for name, rows in others.items()}
    return oof, scores, full
