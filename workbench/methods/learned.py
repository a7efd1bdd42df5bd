"""Everything the workbench learns, saved and loaded one way; and the learned parts a method is built with.

**One protocol.** Every learned artifact class has a class attribute ``kind``, ``to_dict()`` (JSON-ready, with
``"kind"`` and ``"version"``) and a ``from_dict(d)`` classmethod that validates what it reads (DataError on anything
malformed); an artifact with large tensors also has ``tensors()`` and takes ``from_dict(d, tensors=...)``.
:func:`save_learned` / :func:`load_learned` write and read them through :mod:`workbench.core.artifact_io` (JSON, plus
safetensors for tensors). The stages write their outputs with it, the evaluation stage and the bundle loader read
them with it, so a run directory and a bundle hold the same bytes.

**A fixed table.** :data:`~workbench.methods.learned_kinds.LEARNED_KINDS` maps each ``kind`` to one of the
workbench's own classes (imported when an artifact is first read or written: the classes import numpy). The file only
names a kind; an unknown kind is refused, and nothing named in a file is ever imported or executed.

=====================  ===========================================================  ==============================
kind                   class                                                        written by
=====================  ===========================================================  ==============================
``calibrator_set``     :class:`~workbench.calibration.calibrator_set.CalibratorSet`  ``calibrate``
``isotonic`` …         one calibrator (:mod:`workbench.calibration`)                inside a calibrator set
``logistic``           :class:`~workbench.classify.logistic.LogisticModel`          ``classify``
``mlp``                :class:`~workbench.classify.mlp.MLPModel`                    ``classify``
``knn``                :class:`~workbench.classify.knn.KNNModel` (+ safetensors)     ``classify``
``tree``               :class:`~workbench.classify.tree.TreeModel`                  ``classify``
``lars``               :class:`~workbench.uncertainty.features.probability.LarsLikeScorer`  ``collect``
``logistic_utility``   :class:`~workbench.methods.seper.utility_classifier.UtilityClassifier`  ``fit_utility``
``ridge_utility``      :class:`~workbench.methods.seper.utility.UtilityPredictor`  ``fit_utility`` (model: ridge)
``ood_profile``        :class:`~workbench.calibration.ood.OODProfile`               ``calibrate``
=====================  ===========================================================  ==============================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.core.artifact_io import envelope_check, parse_artifact, read_artifact, write_artifact
from workbench.core.errors import ConfigError, DataError

CLASSIFIER_KINDS = frozenset({"logistic", "mlp", "knn", "tree"})
"""Kinds a retrieval-decision classifier can be."""

ROUTER_NAMES = {"logistic": "LR", "mlp": "MLP", "knn": "kNN", "tree": "Tree"}
"""Classifier kind → its row in the classify stage's routing table (and its name in the reports)."""

UTILITY_KINDS = frozenset({"logistic_utility", "ridge_utility"})
"""Kinds D²-RAG's gold-free utility can be (a run's ``fit_utility/utility.json``, a bundle's ``learned/utility.json``);
``ridge_utility`` stays readable for runs and bundles made before the classifier."""


def _class_of(kind: str, where: str) -> type:
    """The class of learned-artifact ``kind``; DataError at ``where`` for a kind the table does not hold."""
    from workbench.methods.learned_kinds import LEARNED_KINDS

    if kind not in LEARNED_KINDS:
        raise DataError(f"unknown learned-artifact kind {kind!r} (known: {', '.join(LEARNED_KINDS)})", where)
    return LEARNED_KINDS[kind]


def learned_from_dict(d: Any, expect: Iterable[str] | None = None, where: str = "learned artifact") -> Any:
    """The artifact a dict describes (its ``kind`` looked up in
    :data:`~workbench.methods.learned_kinds.LEARNED_KINDS`); ``expect`` restricts the kinds
    accepted. DataError on an unknown or unexpected kind or a malformed dict."""
    envelope_check(d, where)
    kind = d["kind"]
    allowed = set(expect) if expect is not None else None
    if allowed is not None and kind not in allowed:
        raise DataError(f"expected a {' or '.join(sorted(allowed))} artifact, got kind {kind!r}", where)
    cls = _class_of(kind, where)
    return _built(lambda: cls.from_dict(d), kind, where)


def _built(make: Callable[[], Any], kind: str, where: str) -> Any:
    """``make()``, with any error a malformed file can cause turned into one DataError naming the file."""
    try:
        return make()
    except DataError as exc:  # say which file the malformed dict came from
        raise DataError(exc.what if exc.where is None else f"{exc.where}: {exc.what}", where) from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as exc:
        # a value of the wrong type or shape deep inside a learned file: still one line, never a traceback
        raise DataError(f"malformed {kind} artifact ({type(exc).__name__}: {exc})", where) from None


def save_learned(obj: Any, path: str | Path) -> list[Path]:
    """Write ``obj`` (a learned artifact, see the module docstring) to ``path`` (+ a safetensors file when it has
    tensors); atomic, byte-identical for identical parameters. Returns the written files."""
    from workbench.methods.learned_kinds import LEARNED_KINDS

    if getattr(obj, "kind", None) not in LEARNED_KINDS:
        raise DataError(f"a {type(obj).__name__} is not a learned artifact the workbench can save", str(path))
    tensors = obj.tensors() if hasattr(obj, "tensors") else None
    return write_artifact(path, obj.to_dict(), tensors)


def load_learned(path: str | Path, expect: Iterable[str] | None = None) -> Any:
    """Read an artifact written by :func:`save_learned` (sha256 of its tensor file checked); ``expect`` restricts
    the kinds accepted. DataError naming the file on anything wrong."""
    payload, tensors = read_artifact(path)
    return _learned_from(payload, tensors, expect, str(path))


def load_learned_bytes(
    data: bytes, where: str, read_sibling: Callable[[str], bytes], expect: Iterable[str] | None = None
) -> Any:
    """:func:`load_learned` from the JSON's bytes; ``read_sibling(name)`` gives the bytes of the tensor file it names
    (how a bundle loader reads only bytes whose sha256 it has just checked)."""
    payload, tensors = parse_artifact(data, where, read_sibling)
    return _learned_from(payload, tensors, expect, where)


def _learned_from(payload: dict[str, Any], tensors: dict[str, Any], expect: Iterable[str] | None, where: str) -> Any:
    if not tensors:
        return learned_from_dict(payload, expect, where)
    cls = _class_of(payload["kind"], where)
    if expect is not None and payload["kind"] not in set(expect):
        raise DataError(f"expected a {' or '.join(sorted(expect))} artifact, got kind {payload['kind']!r}", where)
    return _built(lambda: cls.from_dict(payload, tensors=tensors), payload["kind"], where)


@dataclass
class LearnedParts:
    """What D²-RAG needs from earlier stages (or from a bundle).

    ``calibrators`` (feature → fitted calibrator), ``classifier`` (anything with ``predict_proba``), τ, the features
    in the classifier's column order, the fit split's ``medians`` for imputation, the ``utility`` predictor (None:
    none was fitted — the caller decides the fallback), the ``lars_scorer`` (needed when ``lars`` is a feature),
    ``stats`` (the :class:`~workbench.uncertainty.calculators.StatSettings` the features were collected with; None:
    the method's defaults), ``tau_rule`` (how τ was chosen, for the record) and the fit split's ``ood`` profile
    (:class:`~workbench.calibration.ood.OODProfile`; None: no OOD check).
    """

    calibrators: dict[str, Any] = field(default_factory=dict)
    classifier: Any = None
    tau: float | None = None
    features: list[str] = field(default_factory=list)
    medians: dict[str, float] = field(default_factory=dict)
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    utility: Any = None
    lars_scorer: Any = None
    stats: Any = None
    tau_rule: str = ""
    ood: Any = None

    @classmethod
    def assemble(
        cls,
        calibrators: Any,
        classifier: Any,
        tau: float,
        *,
        utility: Any = None,
        lars_scorer: Any = None,
        stats: Any = None,
        tau_rule: str = "",
        ood: Any = None,
    ) -> LearnedParts:
        """The parts from a loaded :class:`~workbench.calibration.calibrator_set.CalibratorSet` and classifier (what
        both a run's stage outputs and a bundle hold)."""
        return cls(
            calibrators=dict(calibrators.calibrators),
            classifier=classifier,
            tau=float(tau),
            features=list(calibrators.features),
            medians=dict(calibrators.medians),
            ranges=dict(calibrators.ranges),
            utility=utility,
            lars_scorer=lars_scorer,
            stats=stats,
            tau_rule=tau_rule,
            ood=ood,
        )

    def policy(self) -> Any:
        """The :class:`~workbench.classify.policy.DecisionPolicy` these parts make (ConfigError without τ or a
        classifier)."""
        from workbench.calibration.calibrator_set import CalibratorSet
        from workbench.classify.policy import DecisionPolicy

        if self.classifier is None or self.tau is None:
            raise ConfigError("no classifier or τ: run the calibrate and classify stages", "learned parts")
        features = tuple(self.features or getattr(self.classifier, "feature_names", ()) or ())
        calibrators = CalibratorSet(features, dict(self.calibrators), dict(self.medians), dict(self.ranges))
        return DecisionPolicy(calibrators, self.classifier, self.tau, self.tau_rule)
