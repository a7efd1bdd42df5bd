"""Methods by name: build any method from the run's tools, its recipe options and the learned parts it needs.

``build_method(name, tools, options, learned)``: ``options`` are the method's settings by field name (an unknown one
is a one-line :class:`ConfigError`); ``learned`` holds what earlier stages fitted (D²-RAG's calibrators, classifier,
τ and utility predictor). The method modules are imported only when built.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from workbench.core.errors import ConfigError
from workbench.methods.base import Method, Tools

METHODS: tuple[str, ...] = (
    "no_rag",
    "standard_rag",
    "oracle",
    "dtr",
    "dense_rag",
    "d2rag",
    "d2rag_oracle",
    "insemrag",
)
"""Every method name ``build_method`` knows, baselines first. ``d2rag`` uses the learned utility predictor (the
oracle when none was fitted); ``d2rag_oracle`` always uses the paper's ΔSePer (gold answer), for the side-by-side."""

GOLD_METHODS = frozenset({"oracle", "d2rag_oracle"})
"""Methods that read the gold answer (evaluation only, never in a bundle)."""


@dataclass
class LearnedParts:
    """What D²-RAG needs from earlier stages: per-feature calibrators, the classifier, τ, the features' order and
    imputation medians, a utility predictor (None → the method's oracle utility, gold-dependent) and the LARS
    scorer the collection fitted (needed when ``lars`` is a feature)."""

    calibrators: dict[str, Any] = field(default_factory=dict)
    classifier: Any = None
    tau: float | None = None
    features: list[str] = field(default_factory=list)
    medians: dict[str, float] = field(default_factory=dict)
    utility: Any = None
    lars_scorer: Any = None


def _settings(cls: type, options: dict[str, Any], method: str) -> Any:
    """``cls(**options)`` with unknown keys reported as a ConfigError naming the method and the known keys."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown} (known: {', '.join(sorted(known))})", f"evaluate.{method}")
    settings = cls(**options)
    if hasattr(settings, "validate"):
        settings.validate()
    return settings


def build_method(name: str, tools: Tools, options: dict[str, Any] | None, learned: LearnedParts | None) -> Method:
    """The method ``name`` ready to answer; ConfigError for an unknown name, option or missing learned part."""
    options = dict(options or {})
    k = int(options.pop("k", 5)) if name in ("standard_rag", "oracle") else None
    if name == "no_rag":
        from workbench.methods.baselines import NoRAG

        return NoRAG(tools)
    if name == "standard_rag":
        from workbench.methods.baselines import StandardRAG

        return StandardRAG(tools, k=k or 5)
    if name == "oracle":
        from workbench.methods.baselines import OracleRouting

        return OracleRouting(tools, k=k or 5)
    if name == "dtr":
        from workbench.methods.dtr import DTR, DTRSettings

        return DTR(tools, settings=_settings(DTRSettings, options, name))
    if name == "dense_rag":
        from workbench.methods.dense_rag import DenseRAG, DenseRAGSettings

        return DenseRAG(tools, settings=_settings(DenseRAGSettings, options, name))
    if name == "insemrag":
        from workbench.methods.controller import HeuristicController, PromptedLMController
        from workbench.methods.insemrag import InSemRAG, InSemRAGSettings

        kind = options.pop("controller", "prompted")
        if kind not in ("prompted", "heuristic"):
            raise ConfigError(f"controller must be prompted or heuristic, got {kind!r}", "evaluate.insemrag")
        controller = PromptedLMController(tools.generator) if kind == "prompted" else HeuristicController()
        return InSemRAG(tools, controller, _settings(InSemRAGSettings, options, name))
    if name in ("d2rag", "d2rag_oracle"):
        if learned is None or learned.classifier is None or learned.tau is None:
            raise ConfigError(f"{name} needs the calibrate and classify stages before evaluate", "evaluate.methods")
        from workbench.methods.d2rag import D2RAG, D2RAGSettings
        from workbench.methods.utility import OracleUtility
        from workbench.uncertainty.seper import SeperSettings

        seper = SeperSettings(
            samples=int(options.pop("seper_samples", 10)),
            max_new_tokens=tools.max_new_tokens,
            seed=0,
        )
        label = str(options.pop("utility_label", "delta_seper_s"))
        oracle = OracleUtility(settings=seper, label=label)
        learned_utility = learned.utility if name == "d2rag" else None
        method = D2RAG(
            tools,
            calibrators=learned.calibrators,
            classifier=learned.classifier,
            tau=learned.tau,
            utility=learned_utility if learned_utility is not None else oracle,
            settings=_settings(D2RAGSettings, {"features": list(learned.features), **options}, name),
            medians=learned.medians,
            lars_scorer=learned.lars_scorer,
        )
        method.name = name
        return method
    raise ConfigError(f"unknown method {name!r} (known: {', '.join(METHODS)})", "evaluate.methods")
