"""The workbench's one binary logistic regression: an L2-penalised maximum-likelihood fit by damped Newton steps.

Three learners share it (issue 16 had them as three copies, each with its own sigmoid and stopping rule):
Platt calibration (one standardised score, no penalty), the LARS-like scorer (standardised log-prob histograms, L2 on
the weights) and the retrieval-decision logistic classifier (standardised calibrated features, L2 = 1 / C on the
weights, as scikit-learn's ``LogisticRegression(C)`` minimises). Small problems (≤ tens of columns), so the exact
Newton step is cheap and converges in a few iterations. numpy only.
"""

from __future__ import annotations

import numpy as np

from workbench.core.errors import DataError


def sigmoid(f: np.ndarray | float) -> np.ndarray:
    """``1 / (1 + e^{-f})`` computed as ``(1 + tanh(f / 2)) / 2``: no overflow for any finite ``f``."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(f, dtype=np.float64)))


def logistic_loss(design: np.ndarray, theta: np.ndarray, targets: np.ndarray, penalty: np.ndarray) -> float:
    """``Σ_i [log(1 + e^{f_i}) − t_i f_i] + ½ Σ_j penalty_j θ_j²`` with ``f = design · θ``."""
    f = design @ theta
    return float(np.sum(np.logaddexp(0.0, f) - targets * f) + 0.5 * np.sum(penalty * theta**2))


def fit_logistic_newton(
    design: np.ndarray,
    targets: np.ndarray,
    penalty: np.ndarray | float = 0.0,
    *,
    start: np.ndarray | None = None,
    max_iter: int = 100,
    tol: float = 1e-10,
) -> np.ndarray:
    """The ``θ`` minimising :func:`logistic_loss` (targets ``t_i`` in [0, 1]; soft targets allowed).

    ``design`` is ``(n, d)`` — include a column of ones for an intercept and give it penalty 0; ``penalty`` is one
    L2 strength per column (or one for all). Newton steps on the penalised loss (a 1e-12 ridge keeps the Hessian
    invertible on separable or collinear data), each shortened by Armijo back-tracking until it lowers the loss;
    stops when a step moves no coefficient by more than ``tol``, when no shortened step helps, or after
    ``max_iter`` steps (unpenalised separable data has no finite optimum). ``start``: the initial θ (default 0).
    DataError on mismatched shapes or non-finite input.
    """
    x = np.asarray(design, dtype=np.float64)
    t = np.asarray(targets, dtype=np.float64).reshape(-1)
    if x.ndim != 2 or x.shape[0] != t.size:
        raise DataError(f"design {x.shape} does not match {t.size} targets", "logistic fit")
    if not (np.isfinite(x).all() and np.isfinite(t).all()):
        raise DataError("non-finite design or targets", "logistic fit")
    lam = np.broadcast_to(np.asarray(penalty, dtype=np.float64), (x.shape[1],))
    theta = np.zeros(x.shape[1]) if start is None else np.asarray(start, dtype=np.float64).copy()
    loss = logistic_loss(x, theta, t, lam)
    for _ in range(max_iter):
        p = sigmoid(x @ theta)
        grad = x.T @ (p - t) + lam * theta
        hess = (x * (p * (1.0 - p))[:, None]).T @ x + np.diag(lam) + 1e-12 * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        rate = 1.0
        while rate > 1e-10:
            trial = theta - rate * step
            trial_loss = logistic_loss(x, trial, t, lam)
            if trial_loss <= loss - 1e-4 * rate * float(grad @ step):
                break
            rate *= 0.5
        else:
            break
        theta, loss = trial, trial_loss
        if float(np.max(np.abs(rate * step))) < tol:
            break
    return theta
