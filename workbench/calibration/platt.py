"""Platt scaling: a sigmoid of an affine function of the score, fitted by logistic regression (Newton's method)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

import numpy as np

from workbench.calibration.base import (
    FORMAT_VERSION,
    Calibrator,
    as_scores,
    check_fit_inputs,
    finite_number,
    require_keys,
)
from workbench.calibration.logistic_fit import fit_logistic_newton, sigmoid
from workbench.calibration.standardize import fit_standardizer


def platt_targets(labels: np.ndarray, prior_smoothing: bool) -> np.ndarray:
    """Platt's (1999) regularised targets: positives → (N₊+1)/(N₊+2), negatives → 1/(N₋+2).

    Soft labels y in [0, 1] mix the two, ``t = y·t₊ + (1 - y)·t₋`` with N₊ = Σ y, N₋ = Σ (1 - y). Without
    smoothing the labels are the targets.
    """
    if not prior_smoothing:
        return labels
    n_pos, n_neg = float(labels.sum()), float((1.0 - labels).sum())
    return labels * (n_pos + 1.0) / (n_pos + 2.0) + (1.0 - labels) / (n_neg + 2.0)


def fit_logistic_1d(scores: np.ndarray, targets: np.ndarray, max_iter: int = 100) -> tuple[float, float]:
    """Maximum-likelihood ``(a, b)`` of ``P = σ(a·s + b)`` by damped Newton steps on the standardised score.

    Minimises ``Σ_i log(1 + e^{f_i}) - t_i f_i`` with ``f_i = a·s_i + b`` (targets t_i in [0, 1]), unpenalised, by
    :func:`~workbench.calibration.logistic_fit.fit_logistic_newton` started at the prior log-odds (separable data
    without smoothing has no finite optimum: it stops after ``max_iter`` steps).
    """
    mean, scale = fit_standardizer(scores)
    mu, sd = float(mean), float(scale)
    z = (scores - mu) / sd
    t_mean = float(np.clip(targets.mean(), 1e-12, 1.0 - 1e-12))
    design = np.stack([z, np.ones_like(z)], axis=1)
    theta = fit_logistic_newton(
        design, targets, start=np.array([0.0, np.log(t_mean / (1.0 - t_mean))]), max_iter=max_iter
    )
    a_std, b_std = float(theta[0]), float(theta[1])
    return a_std / sd, b_std - a_std * mu / sd


class PlattCalibrator(Calibrator):
    """``P(correct | s) = σ(a·s + b)``, fitted by logistic regression of the labels on the 1-D score.

    With ``prior_smoothing=True`` (the default, as in Platt 1999 and scikit-learn's sigmoid calibration) the 0/1
    labels are replaced by :func:`platt_targets`, which keeps ``a`` finite on separable data. ``a > 0`` when
    higher scores go with correct answers. Stored as ``{"a": a, "b": b}``.
    """

    def __init__(self, prior_smoothing: bool = True) -> None:
        self.prior_smoothing = bool(prior_smoothing)
        self.a_: float | None = None
        self.b_: float | None = None

    @property
    def kind(self) -> str:
        return "platt"

    @property
    def is_fitted(self) -> bool:
        return self.a_ is not None

    @property
    def strictly_increasing(self) -> bool:
        return self.a_ is not None and self.a_ > 0.0

    def fit(self, scores: Sequence[float], labels: Sequence[float]) -> Self:
        s, y = check_fit_inputs(scores, labels)
        self.a_, self.b_ = fit_logistic_1d(s, platt_targets(y, self.prior_smoothing))
        return self

    def predict(self, scores: Sequence[float]) -> np.ndarray:
        self._require_fitted()
        assert self.a_ is not None and self.b_ is not None
        return sigmoid(self.a_ * as_scores(scores) + self.b_)

    def to_dict(self) -> dict[str, Any]:
        self._require_fitted()
        return {"kind": self.kind, "version": FORMAT_VERSION, "a": self.a_, "b": self.b_}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PlattCalibrator:
        """Rebuild from :meth:`to_dict` output; :class:`DataError` on missing keys or non-finite coefficients."""
        require_keys(d, "platt", ("a", "b"))
        out = cls()
        out.a_ = finite_number(d["a"], "a", "platt")
        out.b_ = finite_number(d["b"], "b", "platt")
        return out
