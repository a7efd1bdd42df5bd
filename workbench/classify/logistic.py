"""Logistic regression on standardised features: fitted and applied in numpy, stored as JSON."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from workbench.calibration.logistic_fit import fit_logistic_newton, sigmoid
from workbench.calibration.standardize import fit_standardizer
from workbench.classify.inputs import as_features, as_labels, resolve_feature_names
from workbench.core.errors import ConfigError, DataError

FORMAT_VERSION = 1
"""Version of the dict layout written by :meth:`LogisticModel.to_dict`."""


@dataclass(frozen=True)
class LogisticModel:
    """A fitted logistic model: ``P(correct) = σ(((x − mean) / scale) · coef + intercept)``.

    ``coef`` is on the standardised scale, one weight per feature in ``feature_names`` order. P(correct) is the
    probability that the closed-book answer is correct, i.e. that no retrieval is needed.
    """

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    feature_names: tuple[str, ...]

    kind: ClassVar[str] = "logistic"

    @property
    def n_features(self) -> int:
        """The number of input features."""
        return int(self.coef.size)

    def decision_function(self, X: object) -> np.ndarray:
        """The logit of P(correct) for each row of ``X`` (raw, un-standardised features); DataError on bad input."""
        arr = as_features(X, n_features=self.n_features)
        return ((arr - self.mean) / self.scale) @ self.coef + self.intercept

    def predict_proba(self, X: object) -> np.ndarray:
        """P(correct) = P(no retrieval needed) for each row of ``X``, a float64 vector ``[rows]``."""
        return sigmoid(self.decision_function(X))

    def weights(self, *, standardised: bool = True) -> dict[str, float]:
        """Feature name → weight, plus ``"(intercept)"``, for reports.

        ``standardised=True`` gives the weights on the standardised scale (comparable across features); ``False``
        gives them in the raw feature units, with the intercept adjusted to match.
        """
        if standardised:
            coef, intercept = self.coef, self.intercept
        else:
            coef = self.coef / self.scale
            intercept = self.intercept - float(np.dot(coef, self.mean))
        out = {name: float(w) for name, w in zip(self.feature_names, coef, strict=True)}
        out["(intercept)"] = float(intercept)
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description of the model; :meth:`from_dict` restores it exactly."""
        return {
            "kind": self.kind,
            "version": FORMAT_VERSION,
            "feature_names": list(self.feature_names),
            "mean": [float(v) for v in self.mean],
            "scale": [float(v) for v in self.scale],
            "coef": [float(v) for v in self.coef],
            "intercept": float(self.intercept),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LogisticModel:
        """The model described by ``data`` (as written by :meth:`to_dict`); DataError if it is malformed."""
        if not isinstance(data, dict) or data.get("kind") != cls.kind:
            raise DataError("not a logistic model description (kind != 'logistic')", "logistic model")
        if data.get("version") != FORMAT_VERSION:
            raise DataError(
                f"unsupported version {data.get('version')!r} (this workbench reads {FORMAT_VERSION})", "logistic model"
            )
        extra = sorted(set(data) - {"kind", "version", "feature_names", "mean", "scale", "coef", "intercept"})
        if extra:
            raise DataError(f"unknown key(s) {extra}", "logistic model")
        try:
            names = tuple(str(n) for n in data["feature_names"])
            arrays = {key: np.asarray(data[key], dtype=np.float64).reshape(-1) for key in ("mean", "scale", "coef")}
            intercept = float(data["intercept"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"malformed logistic model description ({exc!r})", "logistic model") from None
        sizes = {key: arr.size for key, arr in arrays.items()}
        if set(sizes.values()) != {len(names)}:
            raise DataError(f"inconsistent sizes {sizes} for {len(names)} feature names", "logistic model")
        if not all(np.isfinite(arr).all() for arr in arrays.values()) or not np.isfinite(intercept):
            raise DataError("non-finite parameters", "logistic model")
        if (arrays["scale"] <= 0).any():
            raise DataError("scale must be positive", "logistic model")
        return cls(arrays["mean"], arrays["scale"], arrays["coef"], intercept, names)


def fit_logistic(
    X: object,
    y: object,
    *,
    C: float = 1.0,
    seed: int = 0,
    feature_names: Sequence[str] | None = None,
    max_iter: int = 1000,
) -> LogisticModel:
    """Fit an L2 logistic regression of ``y`` (1 = correct) on standardised ``X``.

    Minimises ``C · Σ_i log-loss_i + ½‖w‖²`` (scikit-learn's ``LogisticRegression(C)`` objective; the intercept is
    not penalised) on ``(X − mean) / scale`` (:func:`~workbench.calibration.standardize.fit_standardizer`) with the
    workbench's one logistic fit, :func:`~workbench.calibration.logistic_fit.fit_logistic_newton` (penalty 1 / C).
    Deterministic: ``seed`` is accepted for the common classifier signature and changes nothing. DataError on
    non-finite features, non-binary or one-class labels, or a feature-name count that does not match ``X``.
    """
    arr = as_features(X)
    labels = as_labels(y, arr.shape[0])
    names = resolve_feature_names(feature_names, arr.shape[1])
    if not C > 0:
        raise ConfigError(f"must be positive, got {C}", "C")
    mean, scale = fit_standardizer(arr)
    design = np.hstack([(arr - mean) / scale, np.ones((arr.shape[0], 1))])
    penalty = np.append(np.full(arr.shape[1], 1.0 / C), 0.0)
    theta = fit_logistic_newton(design, labels, penalty, max_iter=max_iter)
    return LogisticModel(
        mean=mean,
        scale=scale,
        coef=theta[:-1].copy(),
        intercept=float(theta[-1]),
        feature_names=names,
    )
