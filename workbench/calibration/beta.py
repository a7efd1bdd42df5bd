"""Beta calibration (Kull, Silva Filho & Flach, AISTATS 2017): a three-parameter logistic map on (ln s, −ln(1 − s)).

For a score ``s`` in (0, 1), ``P(correct | s) = σ(a·ln s − b·ln(1 − s) + c)`` with ``a, b ≥ 0``: the family holds
Platt's sigmoid of the log-odds (``a = b``) and the identity (``a = b = 1, c = 0``), and bends differently at each end
of the score range where Platt cannot. It is fitted as a logistic regression of the labels on the two inputs
``ln s`` and ``−ln(1 − s)``; a negative coefficient would make the map non-monotone, so, as the paper does, the
model with that input dropped is fitted instead (here every subset of the two inputs is fitted and the best one
whose coefficients are all ≥ 0 is kept: the constrained maximum-likelihood fit).

Features of the workbench are not all in [0, 1] (an oriented entropy is ≤ 0, an NLL unbounded). A score outside
[0, 1] on the fit data is first squashed by a monotone logistic, ``s' = σ((s − m) / d)`` with ``m`` and ``d`` the fit
scores' mean and standard deviation (:func:`~workbench.calibration.standardize.fit_standardizer`), and beta
calibration is fitted on ``s'``; ``m`` and ``d`` are stored. A feature whose fit scores lie in [0, 1] is calibrated
as it is, its scores clipped to ``[EPS, 1 − EPS]`` so the logarithms stay finite (a later score outside [0, 1]
gets the end value). Either way the map is non-decreasing in the raw score, strictly increasing when ``a`` or ``b``
is positive. Prediction is numpy only; stored as ``{"a", "b", "c", "squash": null | [m, d]}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
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
from workbench.calibration.logistic_fit import fit_logistic_newton, logistic_loss, sigmoid
from workbench.calibration.platt import platt_targets
from workbench.calibration.standardize import fit_standardizer
from workbench.core.errors import DataError

EPS = 1e-12
"""Scores of a [0, 1] feature are clipped to ``[EPS, 1 − EPS]`` before the logarithms."""


def beta_log_odds(scores: np.ndarray, squash: tuple[float, float] | None) -> np.ndarray:
    """The log-odds ``z`` of the score as beta calibration reads it: ``ln s' − ln(1 − s')`` of the clipped score
    (``squash`` None), or ``(s − m) / d`` (``squash = (m, d)``: ``s' = σ(z)``). NaN stays NaN."""
    s = np.asarray(scores, dtype=np.float64)
    if squash is not None:
        return (s - squash[0]) / squash[1]
    clipped = np.clip(s, EPS, 1.0 - EPS)
    return np.log(clipped) - np.log1p(-clipped)


def beta_inputs(z: np.ndarray) -> np.ndarray:
    """The two inputs of beta calibration, ``[ln s', −ln(1 − s')]`` with ``s' = σ(z)``, as columns: written
    ``[−softplus(−z), softplus(z)]`` so no value overflows for any finite ``z``."""
    with np.errstate(invalid="ignore"):  # NaN in, NaN out
        return np.stack([-np.logaddexp(0.0, -z), np.logaddexp(0.0, z)], axis=-1)


def fit_beta(inputs: np.ndarray, targets: np.ndarray, max_iter: int = 100) -> tuple[float, float, float]:
    """``(a, b, c)`` maximising the likelihood of ``targets`` under ``σ(a·u₁ + b·u₂ + c)`` subject to ``a, b ≥ 0``.

    ``inputs`` is ``[u₁, u₂]`` per row (:func:`beta_inputs`). Each subset of the two inputs is fitted without a
    penalty by :func:`~workbench.calibration.logistic_fit.fit_logistic_newton` on standardised columns (the
    intercept always in), and the lowest-loss fit whose coefficients are all ≥ 0 is returned — for a convex loss
    that is the constrained optimum. The empty subset (a = b = 0: the constant ``σ(c)``, the mean target) is always
    admissible.
    """
    mean, scale = fit_standardizer(inputs)
    z = (inputs - mean) / scale
    t_mean = float(np.clip(targets.mean(), 1e-12, 1.0 - 1e-12))
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for size in (2, 1, 0):
        for cols in combinations(range(2), size):
            design = np.column_stack([z[:, list(cols)], np.ones(len(z))])
            start = np.zeros(design.shape[1])
            start[-1] = np.log(t_mean / (1.0 - t_mean))
            theta = fit_logistic_newton(design, targets, start=start, max_iter=max_iter)
            if np.any(theta[:-1] < 0.0):
                continue
            loss = logistic_loss(design, theta, targets, np.zeros(design.shape[1]))
            if best is None or loss < best[0] - 1e-12:
                best = (loss, np.asarray(cols, dtype=int), theta)
    assert best is not None  # the empty subset is always admissible
    _, cols, theta = best
    weights = np.zeros(2)
    weights[cols] = theta[:-1] / scale[cols]  # back to the unstandardised inputs
    intercept = float(theta[-1] - np.sum(theta[:-1] * mean[cols] / scale[cols]))
    return float(weights[0]), float(weights[1]), intercept


class BetaCalibrator(Calibrator):
    """``P(correct | s) = σ(a·ln s' − b·ln(1 − s') + c)``, ``a, b ≥ 0``; ``s'`` the score itself when the fit
    scores lie in [0, 1], else its logistic squashing (module docstring).

    With ``prior_smoothing=True`` (the default, as for :class:`~workbench.calibration.platt.PlattCalibrator`) the
    labels are replaced by Platt's regularised targets, which keeps the coefficients finite on separable data.
    """

    def __init__(self, prior_smoothing: bool = True) -> None:
        self.prior_smoothing = bool(prior_smoothing)
        self.a_: float | None = None
        self.b_: float | None = None
        self.c_: float | None = None
        self.squash_: tuple[float, float] | None = None

    @property
    def kind(self) -> str:
        return "beta"

    @property
    def is_fitted(self) -> bool:
        return self.a_ is not None

    @property
    def strictly_increasing(self) -> bool:
        return self.a_ is not None and self.b_ is not None and (self.a_ > 0.0 or self.b_ > 0.0)

    def fit(self, scores: Sequence[float], labels: Sequence[float]) -> Self:
        """Fit on finite scores and labels in [0, 1] with both classes (:func:`check_fit_inputs`)."""
        s, y = check_fit_inputs(scores, labels)
        if s.min() >= 0.0 and s.max() <= 1.0:
            self.squash_ = None
        else:
            mean, scale = fit_standardizer(s)
            self.squash_ = (float(mean), float(scale))
        inputs = beta_inputs(beta_log_odds(s, self.squash_))
        self.a_, self.b_, self.c_ = fit_beta(inputs, platt_targets(y, self.prior_smoothing))
        return self

    def predict(self, scores: Sequence[float]) -> np.ndarray:
        self._require_fitted()
        assert self.a_ is not None and self.b_ is not None and self.c_ is not None
        inputs = beta_inputs(beta_log_odds(as_scores(scores), self.squash_))
        return sigmoid(self.a_ * inputs[..., 0] + self.b_ * inputs[..., 1] + self.c_)

    def to_dict(self) -> dict[str, Any]:
        self._require_fitted()
        squash = None if self.squash_ is None else list(self.squash_)
        return {
            "kind": self.kind,
            "version": FORMAT_VERSION,
            "a": self.a_,
            "b": self.b_,
            "c": self.c_,
            "squash": squash,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BetaCalibrator:
        """Rebuild from :meth:`to_dict` output; :class:`DataError` on missing keys, non-finite or negative ``a`` /
        ``b`` (a non-monotone map), or a ``squash`` that is not null or ``[mean, positive scale]``."""
        require_keys(d, "beta", ("a", "b", "c", "squash"))
        where = "calibrator 'beta'"
        out = cls()
        out.a_ = finite_number(d["a"], "a", "beta")
        out.b_ = finite_number(d["b"], "b", "beta")
        out.c_ = finite_number(d["c"], "c", "beta")
        if out.a_ < 0.0 or out.b_ < 0.0:
            raise DataError("a and b must be >= 0 (a negative one makes the map non-monotone)", where)
        squash = d["squash"]
        if squash is not None:
            if not isinstance(squash, list) or len(squash) != 2:
                raise DataError("squash must be null or [mean, scale]", where)
            mean, scale = finite_number(squash[0], "squash[0]", "beta"), finite_number(squash[1], "squash[1]", "beta")
            if scale <= 0.0:
                raise DataError("the squash scale must be positive", where)
            out.squash_ = (mean, scale)
        return out
