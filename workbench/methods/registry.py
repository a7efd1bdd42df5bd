"""Methods by name: build any method from the run's tools, its recipe options and the learned parts it needs.

``build_method(name, tools, options, learned)``: ``options`` are the method's settings by field name (an unknown one
is a one-line :class:`ConfigError`); ``learned`` holds what earlier stages fitted (D²-RAG's calibrators, classifier,
τ and utility predictor). The method modules are imported only when built.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Literal

from workbench.core.errors import ConfigError
from workbench.methods.base import Method, Tools
from workbench.methods.learned import LearnedParts

__all__ = ["GOLD_METHODS", "METHODS", "LearnedParts", "build_method", "check_options"]

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
"""Every method name ``build_method`` knows, baselines first. ``d2rag`` uses the learned utility predictor (when none
was fitted: ``utility_fallback`` decides); ``d2rag_oracle`` always uses the paper's ΔSePer (gold answer), for the
side-by-side."""

GOLD_METHODS = frozenset({"oracle", "d2rag_oracle"})
"""Methods that read the gold answer (evaluation only, never in a bundle)."""


def _settings(cls: type, options: dict[str, Any], method: str) -> Any:
    """``cls(**options)`` with unknown keys reported as a ConfigError naming the method and the known keys (the
    method's :data:`EXTRA_OPTIONS`, already popped from ``options``, are listed as known too)."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        known_all = sorted(known | EXTRA_OPTIONS.get(method, set()))
        raise ConfigError(f"unknown option(s) {unknown} (known: {', '.join(known_all)})", f"evaluate.{method}")
    settings = cls(**options)
    if hasattr(settings, "validate"):
        settings.validate()
    return settings


CONTROLLER_TOKENS = ("enrich_tokens", "elements_tokens", "follow_up_tokens")
"""Generation caps of the prompted controller's free-text decisions (S1 enrich, S6 elements, S8 follow-up)."""

EXTRA_OPTIONS: dict[str, set[str]] = {
    "standard_rag": {"k"},
    "oracle": {"k"},
    "insemrag": {"controller", *CONTROLLER_TOKENS},
    "d2rag": {"seper_samples", "utility_label"},
    "d2rag_oracle": {"seper_samples", "utility_label"},
}
"""Options a method takes besides its settings dataclass's fields (popped by :func:`build_method`)."""


def _settings_class(name: str) -> type | None:
    """The settings dataclass of method ``name`` (None for the baselines)."""
    if name == "dtr":
        from workbench.methods.dtr import DTRSettings

        return DTRSettings
    if name == "dense_rag":
        from workbench.methods.dense_rag import DenseRAGSettings

        return DenseRAGSettings
    if name == "insemrag":
        from workbench.methods.insemrag import InSemRAGSettings

        return InSemRAGSettings
    if name in ("d2rag", "d2rag_oracle"):
        from workbench.methods.d2rag import D2RAGSettings

        return D2RAGSettings
    return None


def _extras(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """Pop and check the options of ``EXTRA_OPTIONS[name]`` from ``options``; returns them with their defaults."""
    where = f"evaluate.{name}"
    out: dict[str, Any] = {}
    if name in ("standard_rag", "oracle"):
        out["k"] = options.pop("k", 5)
        if isinstance(out["k"], bool) or not isinstance(out["k"], int) or out["k"] < 1:
            raise ConfigError(f"k must be an integer >= 1, got {out['k']!r}", where)
    elif name == "insemrag":
        out["controller"] = options.pop("controller", "prompted")
        if out["controller"] not in ("prompted", "heuristic"):
            raise ConfigError(f"controller must be prompted or heuristic, got {out['controller']!r}", where)
        out["tokens"] = {key: options.pop(key) for key in CONTROLLER_TOKENS if key in options}
        for key, value in out["tokens"].items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{key} must be an integer >= 1, got {value!r}", where)
        if out["tokens"] and out["controller"] != "prompted":
            raise ConfigError(f"{', '.join(out['tokens'])} set the prompted controller's caps only", where)
    elif name in ("d2rag", "d2rag_oracle"):
        out["seper_samples"] = options.pop("seper_samples", 10)
        out["utility_label"] = str(options.pop("utility_label", "delta_seper_s"))
        samples = out["seper_samples"]
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise ConfigError(f"seper_samples must be an integer >= 1, got {samples!r}", where)
        if out["utility_label"] not in ("delta_seper_s", "delta_seper_h"):
            raise ConfigError(
                f"utility_label must be delta_seper_s or delta_seper_h, got {out['utility_label']!r}", where
            )
    return out


def check_options(methods: list[str], options: dict[str, Any]) -> None:
    """Check ``evaluate.methods`` and ``evaluate.options`` before anything runs: known method names, options only for
    known methods, every option a known setting with a valid value. Raises a one-line :class:`ConfigError`."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ConfigError(f"unknown or no method(s) {unknown} (known: {', '.join(METHODS)})", "evaluate.methods")
    strays = sorted(set(options) - set(METHODS))
    if strays:
        raise ConfigError(f"options for unknown method(s) {strays} (known: {', '.join(METHODS)})", "evaluate.options")
    for name, given in options.items():
        try:
            _check_method_options(name, given)
        except ConfigError as exc:  # one place for every option error: the method's entry in evaluate.options
            detail = exc.what if exc.where in (None, f"evaluate.{name}") else f"{exc.where}: {exc.what}"
            raise ConfigError(detail, f"evaluate.options.{name}") from None


def _check_method_options(name: str, given: Any) -> None:
    if given is None:
        return
    if not isinstance(given, dict):
        raise ConfigError(f"options must be a mapping of setting: value, got {given!r}")
    rest = dict(given)
    _extras(name, rest)
    cls = _settings_class(name)
    if cls is None:
        if rest:
            known = ", ".join(sorted(EXTRA_OPTIONS.get(name, set()))) or "none"
            raise ConfigError(f"unknown option(s) {sorted(rest)} (known: {known})")
        return
    if name in ("d2rag", "d2rag_oracle"):
        rest.pop("features", None)  # the classifier's features are known only after classify
    try:
        _settings(cls, rest, name)
    except TypeError as exc:  # a value of the wrong kind reaching a dataclass
        raise ConfigError(f"bad option value: {exc}") from None


def build_method(
    name: str,
    tools: Tools,
    options: dict[str, Any] | None,
    learned: LearnedParts | None,
    *,
    utility_fallback: Literal["oracle", "none"] = "oracle",
) -> Method:
    """The method ``name`` ready to answer; ConfigError for an unknown name, option or missing learned part.

    ``utility_fallback`` is D²-RAG's utility when ``learned.utility`` is None: ``"oracle"`` (evaluation only: the
    paper's ΔSePer, computed with the gold answer) or ``"none"`` (gold-free: δ unknown, every retrieved context is
    decoded neutrally — what a bundle runs). D²-RAG's stats settings are ``learned.stats`` (the settings its features
    were collected with) unless the options set ``stats``."""
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r} (known: {', '.join(METHODS)})", "evaluate.methods")
    check_options([name], {name: options or {}})
    options = dict(options or {})
    extras = _extras(name, options)
    cls = _settings_class(name)
    if name == "no_rag":
        from workbench.methods.baselines import NoRAG

        return NoRAG(tools)
    if name == "standard_rag":
        from workbench.methods.baselines import StandardRAG

        return StandardRAG(tools, k=extras["k"])
    if name == "oracle":
        from workbench.methods.baselines import OracleRouting

        return OracleRouting(tools, k=extras["k"])
    if name == "dtr":
        from workbench.methods.dtr import DTR

        return DTR(tools, settings=_settings(cls, options, name))
    if name == "dense_rag":
        from workbench.methods.dense_rag import DenseRAG

        return DenseRAG(tools, settings=_settings(cls, options, name))
    if name == "insemrag":
        from workbench.methods.controller import HeuristicController, PromptedLMController
        from workbench.methods.insemrag import InSemRAG

        heuristic = extras["controller"] == "heuristic"
        controller = HeuristicController() if heuristic else PromptedLMController(tools.generator, **extras["tokens"])
        return InSemRAG(tools, controller, _settings(cls, options, name))
    # d2rag / d2rag_oracle
    if learned is None or learned.classifier is None or learned.tau is None:
        raise ConfigError(f"{name} needs the calibrate and classify stages before evaluate", "evaluate.methods")
    from workbench.methods.d2rag import D2RAG
    from workbench.methods.utility import NoUtility, OracleUtility
    from workbench.uncertainty.seper import SeperSettings

    if utility_fallback not in ("oracle", "none"):
        raise ConfigError(f"utility_fallback must be oracle or none, got {utility_fallback!r}", "build_method")
    seper = SeperSettings(samples=int(extras["seper_samples"]), max_new_tokens=tools.max_new_tokens, seed=0)
    oracle = OracleUtility(settings=seper, label=extras["utility_label"])
    if name == "d2rag_oracle":
        utility = oracle
    elif learned.utility is not None:
        utility = learned.utility
    else:
        utility = oracle if utility_fallback == "oracle" else NoUtility()
    if learned.stats is not None and "stats" not in options:
        options["stats"] = learned.stats
    method = D2RAG(
        tools,
        utility=utility,
        settings=_settings(cls, {"features": list(learned.features), **options}, name),
        lars_scorer=learned.lars_scorer,
        policy=learned.policy(),
    )
    method.name = name
    return method
