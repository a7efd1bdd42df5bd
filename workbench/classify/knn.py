"""A k-nearest-neighbour retrieval-decision classifier: reference points kept from the fit split, applied in numpy.

P(correct) of a row is the share of correct answers among its ``n_neighbors`` nearest reference points (Euclidean
distance on standardised features, uniform weights: scikit-learn's ``KNeighborsClassifier`` defaults, as AdaRAGUE's
k-NN router uses them). Nearest means the ``k`` smallest squared distances (summed in float64, ranked
at float32 precision so that summation order cannot split a tie), ties broken by the lower reference index — the
rule the ONNX ``TopK`` operator follows, so numpy and the exported graph pick the same neighbours.

The reference points travel as safetensors (``tensors()``: the standardised points and their labels), the settings
as JSON; the runtime applies the model with numpy only. Rows are read at float32 precision (the precision the ONNX
graph's input has), then computed in float64 in both numpy and the graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from workbench.calibration.standardize import fit_standardizer
from workbench.classify.inputs import as_features, as_labels, resolve_feature_names
from workbench.core.errors import ConfigError, DataError

FORMAT_VERSION = 1
"""Version of the dict layout written by :meth:`KNNModel.to_dict`."""

MAX_REFERENCE_POINTS = 50_000
"""Most reference points a model may hold (the graph computes ``points × features`` values per row)."""


@dataclass(frozen=True)
class KNNConfig:
    """The k-NN's setting: ``n_neighbors`` (scikit-learn's default 5), at least 1; ConfigError otherwise."""

    n_neighbors: int = 5

    def __post_init__(self) -> None:
        k = self.n_neighbors
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"must be an integer >= 1, got {k!r}", "knn.n_neighbors")


@dataclass(frozen=True, eq=False)
class KNNModel:
    """A fitted k-NN: standardisation (``mean``, ``scale``), the standardised reference ``points`` ``[m, n]`` and
    their ``labels`` (1 = correct), and ``n_neighbors`` (at most ``m``). ``predict_proba`` gives P(correct)."""

    mean: np.ndarray
    scale: np.ndarray
    points: np.ndarray
    labels: np.ndarray
    n_neighbors: int
    feature_names: tuple[str, ...]

    kind: ClassVar[str] = "knn"

    @property
    def n_features(self) -> int:
        """The number of input features."""
        return int(self.mean.size)

    def standardise(self, X: object) -> np.ndarray:
        """``X`` read at float32 precision, standardised in float64 (as the ONNX graph computes it)."""
        arr = as_features(X, n_features=self.n_features).astype(np.float32).astype(np.float64)
        return (arr - self.mean) / self.scale

    def neighbours(self, X: object) -> np.ndarray:
        """Indices ``[rows, n_neighbors]`` of each row's nearest reference points, nearest first (ties: lower
        index first)."""
        diff = self.standardise(X)[:, None, :] - self.points[None, :, :]
        # ranked in float32: two float64 sums of the same squares in another order (ONNX Runtime's) differ in the
        # last bits, which would break a tie between equidistant points differently; float32 keeps the tie
        distances = (diff * diff).sum(axis=2).astype(np.float32)
        return np.argsort(distances, axis=1, kind="stable")[:, : self.n_neighbors]

    def predict_proba(self, X: object) -> np.ndarray:
        """P(correct) for each row of ``X``: the share of correct answers among its neighbours, float64 ``[rows]``;
        DataError on bad input."""
        return self.labels[self.neighbours(X)].mean(axis=1)

    def to_dict(self) -> dict[str, Any]:
        """The JSON part: settings, feature names, standardisation (the points are in :meth:`tensors`)."""
        return {
            "kind": self.kind,
            "version": FORMAT_VERSION,
            "feature_names": list(self.feature_names),
            "n_neighbors": int(self.n_neighbors),
            "mean": [float(v) for v in self.mean],
            "scale": [float(v) for v in self.scale],
        }

    def tensors(self) -> dict[str, np.ndarray]:
        """The reference points ``[m, n]`` and labels ``[m]``, float64 (safetensors)."""
        return {"points": np.ascontiguousarray(self.points), "labels": np.ascontiguousarray(self.labels)}

    @classmethod
    def from_dict(cls, d: Any, tensors: Mapping[str, Any] | None = None) -> KNNModel:
        """Rebuild from :meth:`to_dict` and :meth:`tensors`; DataError when anything is missing, malformed or
        inconsistent (sizes, non-finite values, labels other than 0 / 1, more neighbours than points)."""
        where = "knn model"
        if not isinstance(d, dict) or d.get("kind") != cls.kind:
            raise DataError("not a k-NN description (kind != 'knn')", where)
        if d.get("version") != FORMAT_VERSION:
            raise DataError(f"unsupported version {d.get('version')!r} (this workbench reads {FORMAT_VERSION})", where)
        keys = {"kind", "version", "feature_names", "n_neighbors", "mean", "scale"}
        extra, missing = sorted(set(d) - keys), sorted(keys - set(d))
        if extra or missing:
            raise DataError(f"unknown key(s) {extra}" if extra else f"missing key(s) {missing}", where)
        tensors = tensors or {}
        if set(tensors) != {"points", "labels"}:
            raise DataError("the tensors must be exactly 'points' and 'labels'", where)
        try:
            config = KNNConfig(d["n_neighbors"])
            names = tuple(str(n) for n in d["feature_names"])
            mean = np.asarray(d["mean"], dtype=np.float64).reshape(-1)
            scale = np.asarray(d["scale"], dtype=np.float64).reshape(-1)
            points = np.asarray(tensors["points"], dtype=np.float64)
            labels = np.asarray(tensors["labels"], dtype=np.float64).reshape(-1)
        except (TypeError, ValueError, ConfigError) as exc:
            raise DataError(f"malformed k-NN description ({exc})", where) from None
        n = len(names)
        if mean.size != n or scale.size != n or points.ndim != 2 or points.shape[1] != n:
            raise DataError(f"sizes do not fit {n} feature names", where)
        if not 1 <= labels.size == points.shape[0] <= MAX_REFERENCE_POINTS:
            raise DataError(f"must hold 1 to {MAX_REFERENCE_POINTS} points, one label each", where)
        if not all(np.isfinite(a).all() for a in (mean, scale, points)) or (scale <= 0).any():
            raise DataError("non-finite parameters or non-positive scales", where)
        if not np.isin(labels, (0.0, 1.0)).all():
            raise DataError("labels must be 0 or 1", where)
        if config.n_neighbors > labels.size:
            raise DataError("more neighbours than reference points", where)
        return cls(mean, scale, points, labels, config.n_neighbors, names)


def fit_knn(
    X: object,
    y: object,
    config: KNNConfig | None = None,
    *,
    seed: int = 0,
    feature_names: Sequence[str] | None = None,
) -> KNNModel:
    """Fit a k-NN on ``X`` (rows of features) and ``y`` (1 = correct): the standardised rows and their labels become
    the reference points (a k-NN's fit is keeping them; its predictions equal scikit-learn's
    ``KNeighborsClassifier(n_neighbors, weights="uniform")`` on the same rows wherever no distance ties, which the
    tests check). Deterministic (``seed`` is accepted for the common classifier signature). ConfigError when
    ``n_neighbors`` exceeds the rows; DataError on non-finite features, one-class labels or too many rows."""
    config = config or KNNConfig()
    arr = as_features(X)
    labels = as_labels(y, arr.shape[0])
    names = resolve_feature_names(feature_names, arr.shape[1])
    if config.n_neighbors > arr.shape[0]:
        raise ConfigError(f"{config.n_neighbors} neighbours but only {arr.shape[0]} training rows", "knn.n_neighbors")
    if arr.shape[0] > MAX_REFERENCE_POINTS:
        raise DataError(f"{arr.shape[0]} training rows, over the {MAX_REFERENCE_POINTS} a k-NN may hold", "X")
    mean, scale = fit_standardizer(arr)
    points = (arr.astype(np.float32).astype(np.float64) - mean) / scale  # the precision the model reads rows at
    return KNNModel(mean, scale, points, labels.astype(np.float64), config.n_neighbors, names)
