"""Synthetic classifier data: 200 rows, 4 features, labels drawn from a known logistic rule (fixed numpy seed)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.classify.mlp import MLPConfig

TRUE_WEIGHTS = np.array([2.5, -2.0, 0.0, 1.5])
FEATURE_NAMES = ("conf", "entropy", "noise", "ptrue")
SMALL_MLP = MLPConfig(hidden_sizes=(16,), max_epochs=30, batch_size=32, patience=5, learning_rate=5e-3)


@dataclass(frozen=True)
class Split:
    X_train: np.ndarray
    y_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray


def make_data(n: int = 200, seed: int = 1234) -> Split:
    """Features ~ N(0, 1) shifted and scaled per column; y = 1 (correct) with probability σ(z · TRUE_WEIGHTS + 0.3)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, TRUE_WEIGHTS.size))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(z @ TRUE_WEIGHTS + 0.3)))).astype(np.float64)
    X = z * np.array([0.2, 3.0, 1.0, 0.05]) + np.array([0.5, -1.0, 10.0, 0.7])  # raw units: standardisation matters
    cut = int(0.7 * n)
    return Split(X[:cut], y[:cut], X[cut:], y[cut:])
