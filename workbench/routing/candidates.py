"""A router specification, its out-of-fold P(correct) on the fit split, and the fitted router a run ships.

A :class:`RouterSpec` names the features, the classifier kind (``logistic`` or ``mlp``), its inputs
(``calibrated``: one calibrator per feature of ``calibrator`` kind; ``raw``: the imputed raw values, which the
classifier standardises itself — :mod:`workbench.calibration.raw`) and the calibrator kind. Its quality on the fit
split is measured out of fold (:meth:`RoutingData.oof_proba`): each fold's calibrators and classifier are fitted
on the other folds only, so every fit-split question is routed by a router that never saw it. The router that is
shipped (:func:`fit_router`) is the same recipe fitted on the whole fit split, with τ chosen on the out-of-fold
predictions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from workbench.calibration.calibrator_set import CalibratorSet
from workbench.calibration.registry import make_calibrator
from workbench.classify.mlp import MLPConfig
from workbench.classify.select import KINDS, fit_one, split_train_val
from workbench.core.errors import ConfigError, DataError
from workbench.methods.learned import ROUTER_NAMES

INPUTS = ("calibrated", "raw")
"""What a router's classifier reads: calibrated features, or the raw (imputed) ones."""


@dataclass(frozen=True)
class RouterSpec:
    """One router: ``features`` (in column order), classifier ``kind``, ``inputs`` and ``calibrator`` (the kind of
    each feature's calibrator; ``raw`` whenever ``inputs`` is raw)."""

    features: tuple[str, ...]
    kind: str = "logistic"
    inputs: str = "calibrated"
    calibrator: str = "isotonic"

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", tuple(self.features))
        if not self.features:
            raise ConfigError("a router needs at least one feature", "router")
        if self.kind not in KINDS:
            raise ConfigError(f"unknown classifier kind {self.kind!r}", "router.kind")
        if self.inputs not in INPUTS:
            raise ConfigError(f"inputs must be one of {list(INPUTS)}, got {self.inputs!r}", "router.inputs")
        if self.inputs == "raw":
            object.__setattr__(self, "calibrator", "raw")

    @property
    def label(self) -> str:
        """A short human-readable name, e.g. ``LR(confidence+entropy; isotonic)``."""
        kind = ROUTER_NAMES[self.kind]
        return f"{kind}({'+'.join(self.features)}; {self.calibrator})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        out = asdict(self)
        out["features"] = list(self.features)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RouterSpec:
        """The spec :meth:`to_dict` wrote."""
        return cls(tuple(d["features"]), str(d["kind"]), str(d["inputs"]), str(d["calibrator"]))


@dataclass
class RoutingData:
    """One split's routing inputs: the raw (imputed) ``features`` matrix (questions × ``names``), the closed-book
    correctness ``label`` (0/1), and the routed QA score of each question closed-book (``qa_closed``) and with
    retrieval (``qa_rag``)."""

    names: tuple[str, ...]
    raw: np.ndarray
    label: np.ndarray
    qa_closed: np.ndarray
    qa_rag: np.ndarray
    folds: np.ndarray | None = None
    seed: int = 0
    logistic_c: float = 1.0
    mlp_config: Any = None
    val_fraction: float = 0.3
    knn_config: Any = None
    tree_config: Any = None
    _oof: dict[RouterSpec, np.ndarray] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.names = tuple(self.names)
        self.raw = np.asarray(self.raw, dtype=float).reshape(len(self.label), len(self.names))
        for name in ("label", "qa_closed", "qa_rag"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=float))
        if not np.isfinite(self.raw).all():
            raise DataError("routing needs imputed (finite) raw features", "calibrated.json")

    @property
    def n(self) -> int:
        """Questions."""
        return int(self.label.size)

    def columns(self, features: Sequence[str]) -> np.ndarray:
        """The raw columns of ``features``, in that order."""
        missing = [f for f in features if f not in self.names]
        if missing:
            raise DataError(f"feature(s) {missing} were not collected", "router.features")
        return self.raw[:, [self.names.index(f) for f in features]]

    def quality(self, retrieve: np.ndarray) -> float:
        """Mean routed QA score: the answer with passages where ``retrieve``, else the closed-book one."""
        return float(np.where(retrieve, self.qa_rag, self.qa_closed).mean()) if self.n else float("nan")

    def routed_scores(self, retrieve: np.ndarray) -> np.ndarray:
        """The routed QA score per question."""
        return np.where(retrieve, self.qa_rag, self.qa_closed)

    def oof_proba(self, spec: RouterSpec) -> np.ndarray:
        """Out-of-fold P(correct) of every question under ``spec`` (memoised per spec): calibrators and classifier
        fitted on the other folds (``folds``; stratified on the label)."""
        if spec in self._oof:
            return self._oof[spec]
        if self.folds is None:
            raise ConfigError("out-of-fold routing needs folds", "router")
        x = self.columns(spec.features)
        out = np.full(self.n, np.nan)
        for fold in np.unique(self.folds):
            held = self.folds == fold
            calibrators, model = _fit_parts(spec, x[~held], self.label[~held], self)
            out[held] = model.predict_proba(_transform(calibrators, x[held]))
        self._oof[spec] = out
        return out


def _fit_parts(spec: RouterSpec, x: np.ndarray, y: np.ndarray, data: RoutingData) -> tuple[list[Any], Any]:
    """Per-feature calibrators fitted on ``x`` / ``y``, and the classifier fitted on their outputs."""

    calibrators = [make_calibrator(spec.calibrator).fit(x[:, j], y) for j in range(x.shape[1])]
    inputs = _transform(calibrators, x)
    x_stop = y_stop = None
    config = data.mlp_config
    if spec.kind == "mlp":
        config = config or MLPConfig()
        train, val = split_train_val(y, data.val_fraction, data.seed)
        x_stop, y_stop, inputs, y = inputs[val], y[val], inputs[train], y[train]
    model = fit_one(
        spec.kind,
        inputs,
        y,
        x_stop,
        y_stop,
        seed=data.seed,
        mlp_config=config,
        feature_names=list(spec.features),
        logistic_C=data.logistic_c,
        knn_config=data.knn_config,
        tree_config=data.tree_config,
    )
    return calibrators, model


def _transform(calibrators: Sequence[Any], x: np.ndarray) -> np.ndarray:
    return np.stack([c.predict(x[:, j]) for j, c in enumerate(calibrators)], axis=1)


@dataclass
class FittedRouter:
    """A router fitted on the whole fit split: its spec, per-feature calibrators (by feature), classifier and τ."""

    spec: RouterSpec
    calibrators: dict[str, Any]
    classifier: Any
    tau: float

    def proba(self, raw: np.ndarray) -> np.ndarray:
        """P(correct) for raw (imputed) rows in the spec's feature order."""
        cols = [self.calibrators[f].predict(raw[:, j]) for j, f in enumerate(self.spec.features)]
        return self.classifier.predict_proba(np.stack(cols, axis=1))

    def calibrator_set(self, medians: Mapping[str, float], ranges: Mapping[str, Any]) -> Any:
        """The :class:`~workbench.calibration.calibrator_set.CalibratorSet` a bundle ships (the fit split's medians
        and ranges of these features, for imputation)."""

        feats = self.spec.features
        return CalibratorSet(
            feats,
            dict(self.calibrators),
            {f: medians[f] for f in feats if f in medians},
            {f: tuple(ranges[f]) for f in feats if f in ranges},
        )


def fit_router(spec: RouterSpec, data: RoutingData, tau: float) -> FittedRouter:
    """``spec`` fitted on every question of ``data`` (τ as chosen out of fold)."""
    calibrators, model = _fit_parts(spec, data.columns(spec.features), data.label, data)
    return FittedRouter(spec, dict(zip(spec.features, calibrators, strict=True)), model, float(tau))
