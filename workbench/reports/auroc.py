"""AUROC intervals of the collected features, shared by the ``collect`` stage's report section
(:mod:`workbench.stages.collect.report`) and the run's findings (:mod:`workbench.reports.findings`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from workbench.metrics.bootstrap import N_RESAMPLES, bootstrap_interval
from workbench.metrics.ranking import auroc_rows


def bootstrap_auroc(
    scores: list[float], labels: list[float], *, draws: int = N_RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """A 90% BCa interval of the AUROC over ``draws`` bootstrap resamples of the questions (NaN if undefined).

    :func:`workbench.metrics.bootstrap.bootstrap_interval`: resamples with one class only make the AUROC NaN, and
    then the interval is the percentile one of the defined resamples (NaN when fewer than half are). Small splits
    with few correct answers give wide intervals; the report prints them so nobody over-reads a rank.
    """

    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=float)
    return bootstrap_interval(
        lambda idx: auroc_rows(s[idx], y[idx]), s.size, n_resamples=draws, seed=seed, vectorized=True
    ).as_tuple()


MIN_PER_CLASS = 5  # fewer correct (or wrong) answers than this: no bootstrap interval for the split's AUROC


def minority(rows: list[dict[str, Any]]) -> int:
    """The size of the smaller class (correct / wrong closed-book answers) among ``rows``."""
    positives = int(sum(r["correct_contains"] for r in rows))
    return min(positives, len(rows) - positives)


def split_rows(collect_dir: Path, split: str) -> list[dict[str, Any]]:
    """The collected rows of ``split`` (features and labels per question); [] when the split was not collected."""
    import datasets

    path = collect_dir / split
    return datasets.load_from_disk(str(path)).to_list() if path.exists() else []


def auroc_interval(rows: list[dict[str, Any]], feature: str) -> tuple[float, float] | None:
    """The 90% BCa interval of ``feature``'s AUROC for ``correct_contains`` over ``rows`` (:func:`bootstrap_auroc`);
    None when the rows hold fewer than :data:`MIN_PER_CLASS` correct or wrong answers (anecdotal) or the interval is
    undefined."""
    if not rows or minority(rows) < MIN_PER_CLASS:
        return None
    low, high = bootstrap_auroc([r[feature] for r in rows], [r["correct_contains"] for r in rows])
    return None if math.isnan(low) else (low, high)
