"""D²-RAG's retrieval decision as one object: raw features → calibrated u → P(correct) → retrieve iff P < τ.

:class:`DecisionPolicy` is the one implementation of the decision path (spec §4 and §13.16 / §13.22): the evaluation
stage's D²-RAG, the runtime's D²-RAG and the ``bench-runtime`` parity check all call :meth:`DecisionPolicy.decide`.
The classifier is any object with ``predict_proba(X) -> P(correct)`` and ``feature_names``: the numpy logistic or MLP
model, or :class:`~workbench.classify.onnx_export.OnnxClassifier` (ONNX Runtime) — the same numbers either way. A
classifier whose ``input`` is ``"raw"`` (the bundle's ONNX decision graph: the calibrators are inside it) is given the
cleaned raw features instead of the calibrated ones; the calibrated ``u`` is still computed for the trace.

τ may be 1 + ε (:data:`~workbench.classify.threshold.ABOVE_ONE`): the threshold rule's "always retrieve" choice,
since every probability is < 1 + ε. Anything above that, below 0 or non-finite is refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.calibration.calibrator_set import CalibratorSet
from workbench.classify.threshold import ABOVE_ONE
from workbench.core.errors import ConfigError, DataError


def check_tau(tau: Any, where: str = "tau") -> float:
    """τ as a float in [0, 1 + ε]; ConfigError otherwise (1 + ε is the rule's "always retrieve" choice)."""
    if isinstance(tau, bool) or not isinstance(tau, int | float) or not math.isfinite(tau) or not 0 <= tau <= ABOVE_ONE:
        raise ConfigError(f"tau must be in [0, 1] (or 1 + ε: always retrieve), got {tau!r}", where)
    return float(tau)


@dataclass
class Decision:
    """One question's decision: ``p_correct``, ``retrieve`` (p < τ), the cleaned ``raw`` and ``calibrated`` values in
    feature order, and the names of the features that were imputed."""

    p_correct: float
    retrieve: bool
    raw: np.ndarray
    calibrated: np.ndarray
    imputed: list[str]


class DecisionPolicy:
    """A :class:`CalibratorSet`, a classifier over its calibrated outputs, and τ.

    ``rule`` records how τ was chosen (provenance only). The classifier's ``feature_names``, when it has them, must
    equal the calibrator set's features (same order): a model trained on another layout is refused.
    """

    def __init__(self, calibrators: CalibratorSet, classifier: Any, tau: float, rule: str = "") -> None:
        names = tuple(getattr(classifier, "feature_names", ()) or ())
        if names and names != calibrators.features:
            raise DataError(
                f"classifier features {list(names)} differ from the calibrated features {list(calibrators.features)}",
                "decision policy",
            )
        if not hasattr(classifier, "predict_proba"):
            raise ConfigError(f"a {type(classifier).__name__} has no predict_proba", "decision policy")
        self.calibrators = calibrators
        self.classifier = classifier
        self.tau = check_tau(tau)
        self.rule = rule

    @property
    def features(self) -> tuple[str, ...]:
        """The features the policy reads, in column order."""
        return self.calibrators.features

    @property
    def always_retrieves(self) -> bool:
        """True when τ > 1: every question is retrieved for, whatever its features."""
        return self.tau > 1.0

    @property
    def classifier_reads_raw(self) -> bool:
        """Whether the classifier takes the raw features (an ONNX decision graph, calibrators inside)."""
        return getattr(self.classifier, "input", "calibrated") == "raw"

    def p_correct(self, raw_rows: Sequence[Mapping[str, float] | Sequence[float]]) -> np.ndarray:
        """P(correct) for several questions' raw features (non-finite values imputed as in :meth:`decide`)."""
        cleaned = np.asarray([self.calibrators.clean(r)[0] for r in raw_rows], dtype=float)
        if cleaned.size == 0:
            return np.zeros(0)
        inputs = cleaned if self.classifier_reads_raw else self.calibrators.transform(cleaned)
        return np.asarray(self.classifier.predict_proba(inputs), dtype=float).reshape(-1)

    def decide(self, raw: Mapping[str, float] | Sequence[float]) -> Decision:
        """Clean → calibrate → classify → compare with τ, for one question's raw oriented features."""
        cleaned, imputed = self.calibrators.clean(raw)
        u = self.calibrators.transform(cleaned[None, :])
        inputs = cleaned[None, :] if self.classifier_reads_raw else u
        p = float(np.asarray(self.classifier.predict_proba(inputs), dtype=float).reshape(-1)[0])
        return Decision(p, p < self.tau, cleaned, u[0], imputed)
