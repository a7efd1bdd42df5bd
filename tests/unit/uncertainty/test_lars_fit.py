"""LARS cross-fitting: stratified folds, out-of-fold scores on the fit split, one scorer for the other splits."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.core.errors import DataError
from workbench.stages.collect.run import fit_lars_column
from workbench.uncertainty.features.probability import LarsLikeScorer
from workbench.uncertainty.lars_fit import cross_fit_lars


def _answers(n: int, seed: int) -> tuple[list[list[float]], list[float]]:
    """Confident answers (token probs ~0.9) are correct, hesitant ones (~0.2) wrong, with 10% label noise."""
    rng = np.random.default_rng(seed)
    logprobs, labels = [], []
    for _ in range(n):
        correct = rng.random() < 0.5
        p = rng.uniform(0.7, 0.99, size=3) if correct else rng.uniform(0.05, 0.4, size=3)
        logprobs.append(np.log(p).tolist())
        labels.append(float(correct != (rng.random() < 0.1)))
    return logprobs, labels


def test_cross_fit_scores_are_out_of_fold_and_rank_well():
    logprobs, labels = _answers(120, seed=0)
    test_lp, test_labels = _answers(60, seed=1)
    oof, others, scorer = cross_fit_lars(logprobs, labels, {"test": test_lp}, n_folds=4, seed=0)
    in_sample = scorer.predict_many(logprobs)
    assert oof.shape == (120,) and not np.allclose(oof, in_sample)  # each row scored by a model that never saw it
    assert np.allclose(others["test"], scorer.predict_many(test_lp))
    from workbench.metrics.ranking import auroc

    assert auroc(oof, labels) > 0.8 and auroc(others["test"], test_labels) > 0.8
    again = LarsLikeScorer.from_dict(json.loads(json.dumps(scorer.to_dict()))).predict_many(test_lp)
    assert np.allclose(again, others["test"])


def test_cross_fit_refuses_a_fit_split_without_both_classes():
    logprobs, _ = _answers(10, seed=0)
    with pytest.raises(DataError, match="2 correct and 2 wrong"):
        cross_fit_lars(logprobs, [1.0] * 9 + [0.0], {})


def test_fit_lars_column_fills_every_split_and_returns_the_scorer():
    logprobs, labels = _answers(40, seed=2)
    by_split = {
        "calib": [
            {"greedy_logprobs": lp, "correct_contains": y, "lars": float("nan")}
            for lp, y in zip(logprobs, labels, strict=True)
        ],
        "test": [{"greedy_logprobs": lp, "correct_contains": 0.0, "lars": float("nan")} for lp in logprobs[:5]],
    }
    scorer = fit_lars_column(by_split, "calib", folds=5, seed=0)
    assert all(0.0 < r["lars"] < 1.0 for rows in by_split.values() for r in rows)
    assert isinstance(scorer, LarsLikeScorer) and scorer.fitted
    with pytest.raises(DataError, match="not collected"):
        fit_lars_column(by_split, "val", folds=5, seed=0)
