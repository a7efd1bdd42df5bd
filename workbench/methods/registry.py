"""Methods by name: build any method from the run's tools, its recipe options and the learned parts it needs.

``build_method(name, tools, options, learned)``: ``options`` are the method's settings by field name (an unknown one
is a one-line :class:`ConfigError`); ``learned`` holds what earlier stages fitted (D²-RAG's calibrators, classifier,
τ and utility predictor). The method modules are imported only when built.

InSemRAG's controller (``controller: prompted | heuristic | distilled``) may run on a model of its own
(``controller_model``: an embedded name, a local model directory, an explicit hub id, or a distilled LoRA adapter —
an ``adapter.json`` or a directory holding one): a second generator, loaded through the caller's
``controller_generator`` loader (the evaluation stage passes its resources' ``controller_generator``, cached per run),
else built here like the answering generator and shared per :class:`Tools`. Its LM calls count in ``tools.counter``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal

from workbench.core.errors import AssetError, ConfigError
from workbench.methods.base import Method, Tools
from workbench.methods.learned import LearnedParts

__all__ = [
    "CONTROLLERS",
    "GOLD_METHODS",
    "INSEMRAG_METHODS",
    "METHODS",
    "LearnedParts",
    "adapter_file",
    "build_method",
    "check_options",
    "resolve_controller_model",
    "same_weights",
]

METHODS: tuple[str, ...] = (
    "no_rag",
    "standard_rag",
    "oracle",
    "dtr",
    "dense_rag",
    "d2rag",
    "d2rag_oracle",
    "insemrag",
    "insemrag_distilled",
)
"""Every method name ``build_method`` knows, baselines first. ``d2rag`` uses the learned utility predictor (when none
was fitted: ``utility_fallback`` decides); ``d2rag_oracle`` always uses the paper's ΔSePer (gold answer), for the
side-by-side. ``insemrag_distilled`` is InSemRAG whose controller defaults to ``distilled`` (the run's ``distill``
output unless ``controller_model`` names one), so one evaluation puts the prompted and the distilled controller side
by side on the same questions."""

INSEMRAG_METHODS: tuple[str, ...] = ("insemrag", "insemrag_distilled")
"""The InSemRAG variants (same settings and options; they differ in the default ``controller``)."""

CONTROLLERS: tuple[str, ...] = ("prompted", "heuristic", "distilled")
"""InSemRAG's controllers: the paper's prompted LM, the model-free heuristic, and the prompted controller's code over
a distilled student (log-prob scoring)."""

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
    "insemrag": {"controller", "controller_model", *CONTROLLER_TOKENS},
    "insemrag_distilled": {"controller", "controller_model", *CONTROLLER_TOKENS},
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
    if name in INSEMRAG_METHODS:
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
    elif name in INSEMRAG_METHODS:
        out["controller"] = options.pop("controller", "distilled" if name == "insemrag_distilled" else "prompted")
        if out["controller"] not in CONTROLLERS:
            raise ConfigError(f"controller must be prompted, heuristic or distilled, got {out['controller']!r}", where)
        out["controller_model"] = options.pop("controller_model", None)
        model = out["controller_model"]
        if model is not None:
            if out["controller"] == "heuristic":
                raise ConfigError(
                    "controller_model sets an LM controller's model: the heuristic controller has none", where
                )
            _check_model_spec(model, where)
            out["controller_model"] = str(model)
        out["tokens"] = {key: options.pop(key) for key in CONTROLLER_TOKENS if key in options}
        for key, value in out["tokens"].items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{key} must be an integer >= 1, got {value!r}", where)
        if out["tokens"] and out["controller"] == "heuristic":
            raise ConfigError(
                f"{', '.join(out['tokens'])} set the prompted controller's caps only (prompted or distilled)",
                where,
            )
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


def adapter_file(spec: str | Path) -> Path | None:
    """The ``adapter.json`` a controller model reference names — the file itself, or a directory holding one (a
    ``distill`` stage output) — else None (a model reference)."""
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".json":
        return path
    if path.is_dir() and (path / "adapter.json").is_file():
        return path / "adapter.json"
    return None


def _check_model_spec(spec: Any, where: str) -> None:
    """A controller model reference that cannot work, refused before anything loads: not a non-empty string, or a
    path that does not exist (embedded names and explicit hub ids pass; they are resolved when built)."""
    if not isinstance(spec, str | Path) or not str(spec).strip():
        raise ConfigError(f"controller_model must be a model reference or an adapter path, got {spec!r}", where)
    from workbench.assets import EMBEDDED_GENERATORS

    ref = str(spec)
    path = Path(ref).expanduser()
    if ref in EMBEDDED_GENERATORS or path.is_dir() or adapter_file(path) is not None:
        return
    if path.is_file():
        raise ConfigError(f"controller_model {ref!r} is a file but not an adapter.json", where)
    if ref.startswith((".", "/", "~")) or ref.count("/") != 1:
        raise ConfigError(
            f"controller_model {ref!r}: no such model directory or adapter, not an embedded name "
            f"({', '.join(EMBEDDED_GENERATORS)}) and not a hub id",
            where,
        )


def resolve_controller_model(spec: str | Path) -> Any:
    """The :class:`~workbench.assets.ResolvedModel` of a controller model reference: a distilled adapter
    (:func:`adapter_file`) is merged over its base by :func:`workbench.backends.lora.resolve_adapter_model`; anything
    else is resolved like the answering model (:func:`workbench.assets.resolve_generator`)."""
    adapter = adapter_file(spec)
    if adapter is not None:
        from workbench.backends.lora import resolve_adapter_model

        return resolve_adapter_model(adapter)
    from workbench.assets import resolve_generator

    return resolve_generator(str(spec))


def same_weights(a: Any, b: Any) -> bool:
    """Whether two :class:`~workbench.assets.ResolvedModel` load the same weights: the same place and fingerprint
    (a local fingerprint covers file names and sizes only, so two checkpoints of one architecture share it)."""
    return str(a.path) == str(b.path) and a.fingerprint == b.fingerprint


def _shared_controller_generator(tools: Tools) -> Callable[[str], Any]:
    """A loader of controller generators built like ``tools.generator`` (device, dtype, batch size, generation cache,
    seed), counting in ``tools.counter``, one per model (whatever reference names it) and Tools; the answering
    generator itself when the reference resolves to its weights. What :func:`build_method` uses when its caller
    passes no loader."""

    def load(spec: str) -> Any:
        run = tools.generator
        resolved = resolve_controller_model(spec)
        own = getattr(run, "resolved", None)
        if own is not None and same_weights(own, resolved):
            return run

        def build() -> Any:
            from workbench.backends.factory import build_generator

            return build_generator(
                resolved,
                device=str(getattr(run, "device", "cpu")),
                dtype=str(getattr(run, "dtype", "float32")),
                batch_size=int(getattr(run, "batch_size", 8)),
                cache=getattr(run, "cache", None) is not None,
                counter=tools.counter,
                seed=int(getattr(run, "seed", 0)),
            )

        return tools.shared(f"controller_generator:{resolved.path}:{resolved.fingerprint}", build)

    return load


def _controller(
    name: str,
    extras: dict[str, Any],
    settings: Any,
    tools: Tools,
    load: Callable[[str], Any] | None,
    distilled_adapter: str | Path | None,
) -> Any:
    """InSemRAG's controller from its options (see the module doc)."""
    from workbench.methods.controller import HeuristicController, PromptedLMController

    kind, spec = extras["controller"], extras["controller_model"]
    if kind == "heuristic":
        return HeuristicController()
    option = "controller_model"
    if kind == "distilled" and spec is None:
        if distilled_adapter is None:
            raise ConfigError(
                "the distilled controller needs controller_model (an adapter.json, its directory or a model) or the "
                "run's distill stage before evaluate",
                f"evaluate.options.{name}.controller",
            )
        spec, option = str(distilled_adapter), "controller"  # the run's distill output
    generator = tools.generator
    if spec is not None:
        try:
            generator = (load or _shared_controller_generator(tools))(str(spec))
        except AssetError as exc:
            detail = f"{exc.where}: {exc.what}" if exc.where else exc.what
            raise AssetError(detail, f"evaluate.options.{name}.{option}") from None
    return PromptedLMController(
        generator,
        score_mode="logprobs" if kind == "distilled" else "auto",
        keep_threshold=settings.keep_threshold,
        name=kind,
        **extras["tokens"],
    )


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
    controller_generator: Callable[[str], Any] | None = None,
    distilled_adapter: str | Path | None = None,
) -> Method:
    """The method ``name`` ready to answer; ConfigError for an unknown name, option or missing learned part.

    ``utility_fallback`` is D²-RAG's utility when ``learned.utility`` is None: ``"oracle"`` (evaluation only: the
    paper's ΔSePer, computed with the gold answer) or ``"none"`` (gold-free: δ unknown, every retrieved context is
    decoded neutrally — what a bundle runs). D²-RAG's stats settings are ``learned.stats`` (the settings its features
    were collected with) unless the options set ``stats``.

    InSemRAG: ``controller_generator(spec)`` returns the generator of a ``controller_model`` reference (None: built
    here like ``tools.generator``, shared per Tools); ``distilled_adapter`` is the run's ``distill`` output (its
    directory or ``adapter.json``), the model of ``controller: distilled`` when no ``controller_model`` is given —
    without either, a :class:`ConfigError` naming ``evaluate.options.<name>.controller``. A model that cannot be
    loaded is an :class:`AssetError` naming ``evaluate.options.<name>.controller_model`` (``.controller`` for the
    run's distill output)."""
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
    if name in INSEMRAG_METHODS:
        from workbench.methods.insemrag import InSemRAG

        settings = _settings(cls, options, name)
        controller = _controller(name, extras, settings, tools, controller_generator, distilled_adapter)
        method = InSemRAG(tools, controller, settings)
        method.name = name
        return method
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
