"""Column standardisation, one rule for every learner (the LR and MLP classifiers, the LARS scorer, Platt
scaling, the utility models): ``(x − mean) / scale`` with the population standard deviation as scale, and scale 1 for
a column that is constant up to rounding (scikit-learn's ``StandardScaler`` convention)."""

from __future__ import annotations

import numpy as np


def fit_standardizer(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means and scales of a finite matrix ``X`` (1-D input: one column). A column whose std is below
    ``10·eps·max(|mean|, 1)`` — constant but for rounding — gets scale 1, so it standardises to ~0, not to noise."""
    arr = np.asarray(X, dtype=np.float64)
    mean = arr.mean(axis=0)
    scale = arr.std(axis=0)
    scale = np.where(scale < 10 * np.finfo(np.float64).eps * np.maximum(np.abs(mean), 1.0), 1.0, scale)
    return mean, scale
