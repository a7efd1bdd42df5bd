"""Methods by name: one table entry per method, and building any method from the run's tools, its recipe options and
the learned parts it needs.

**The table.** :data:`METHOD_TABLE` holds one :class:`MethodEntry` per method name: its settings dataclass (named as
``module:Class`` and imported only when needed), the dataclass of its options besides those settings
(:class:`RetrievalOptions`, :class:`ControllerOptions`, :class:`UtilityOptions`), defaults a variant changes
(``insemrag_distilled``: ``controller = distilled``), its builder, the learned parts it cannot run without and the
stages that make them, and whether it reads the gold answer. Adding a method is adding one entry. Every option's
type, default and meaning come from the two dataclasses' fields (:func:`workbench.core.config.doc`);
:func:`options_template` prints them for ``workbench config``.

**Options.** ``build_method(name, tools, options, learned)``: ``options`` are the method's settings and options by
field name; :func:`check_options` checks them before anything runs. An error names the option's own key
(``evaluate.options.dtr.tau``; the method's entry when no single given key is at fault). ``learned`` holds what
earlier stages fitted (D²-RAG's calibrators, classifier, τ and utility predictor). The method modules are imported
only when built.

InSemRAG's controller options (``controller``, ``controller_model``, the prompted controller's caps) and the building
of its controller are in :mod:`workbench.methods.controller_options`; their public names are importable from here.
"""

from __future__ import annotations

import importlib
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from workbench.core.bounds import PASSAGES, SAMPLES, check_int
from workbench.core.config import doc, to_plain, type_name
from workbench.core.errors import ConfigError
from workbench.methods.base import Method, Tools
from workbench.methods.controller_options import (
    CONTROLLER_TOKENS,
    CONTROLLERS,
    ControllerOptions,
    adapter_file,
    build_controller,
    resolve_controller_model,
    same_weights,
)
from workbench.methods.learned import LearnedParts

__all__ = [
    "CONTROLLERS",
    "CONTROLLER_TOKENS",
    "GOLD_METHODS",
    "INSEMRAG_METHODS",
    "METHODS",
    "METHOD_TABLE",
    "BuildRequest",
    "ControllerOptions",
    "LearnedParts",
    "MethodEntry",
    "RetrievalOptions",
    "UtilityOptions",
    "adapter_file",
    "build_method",
    "check_options",
    "method_settings",
    "option_fields",
    "options_template",
    "resolve_controller_model",
    "same_weights",
    "settings_class",
]


# ------------------------------------------------------------------------------------------------------ options
@dataclass(frozen=True)
class RetrievalOptions:
    """The option of the baselines that retrieve (Standard RAG, oracle routing)."""

    k: int = doc("passages retrieved and placed in the prompt", 5)

    def validate(self, given: Mapping[str, Any]) -> RetrievalOptions:
        """Raise a :class:`ConfigError` naming the bad key; return ``self``."""
        check_int(self.k, "k", "k", PASSAGES)
        return self


@dataclass(frozen=True)
class UtilityOptions:
    """How D²-RAG's oracle utility (ΔSePer, read with the gold answer) is computed when it is used."""

    seper_samples: int = doc("answers sampled per SePer estimate", 10)
    utility_label: str = doc("the oracle utility: delta_seper_s or delta_seper_h", "delta_seper_s")

    def validate(self, given: Mapping[str, Any]) -> UtilityOptions:
        """Raise a :class:`ConfigError` naming the bad key; return ``self`` with ``utility_label`` as a string."""
        check_int(self.seper_samples, "seper_samples", "seper_samples", SAMPLES)
        label = str(self.utility_label)
        if label not in ("delta_seper_s", "delta_seper_h"):
            raise ConfigError(f"utility_label must be delta_seper_s or delta_seper_h, got {label!r}", "utility_label")
        return replace(self, utility_label=label)


# ------------------------------------------------------------------------------------------------------ the table
@dataclass(frozen=True)
class BuildRequest:
    """What a :class:`MethodEntry`'s builder gets: the method's name, the run's tools, its settings values as given
    (``values``; the builder makes the settings with :meth:`settings`), its checked options (``options``: an
    instance of the entry's options class, or None), the learned parts and the caller's build arguments."""

    name: str
    entry: MethodEntry
    tools: Tools
    values: dict[str, Any]
    options: Any
    learned: LearnedParts | None
    utility_fallback: str
    controller_generator: Callable[[str], Any] | None
    distilled_adapter: str | Path | None

    def settings(self, **extra: Any) -> Any:
        """The validated settings: ``entry``'s settings class over ``extra`` then the given values (None when the
        method has no settings class)."""
        return _settings(self.name, self.entry, {**extra, **self.values})


@dataclass(frozen=True)
class MethodEntry:
    """One method of the table.

    ``settings``: ``module:Class`` of its settings dataclass (None: no settings); ``options``: the dataclass of its
    options besides the settings (None: none); ``defaults``: option defaults this variant changes; ``build``: the
    builder, ``BuildRequest -> Method``; ``requires``: the :class:`LearnedParts` attributes it cannot run without and
    ``requires_stages`` the stages that make them; ``deferred``: settings checked only when built (known only after
    a later stage); ``gold``: it reads the gold answer (evaluation only, never in a bundle); ``family``: the method
    its variants share; ``summary``: one line for ``workbench config``."""

    name: str
    summary: str
    build: Callable[[BuildRequest], Method]
    settings: str | None = None
    options: type | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    requires_stages: tuple[str, ...] = ()
    deferred: tuple[str, ...] = ()
    gold: bool = False
    family: str = ""

    def settings_class(self) -> type | None:
        """The settings dataclass (imported now), or None."""
        if self.settings is None:
            return None
        module, _, name = self.settings.partition(":")
        return getattr(importlib.import_module(module), name)

    def keys(self) -> list[str]:
        """Every option key the method takes: its settings' fields, then its options' fields."""
        return [f.name for f in option_fields(self)]


def _build_no_rag(req: BuildRequest) -> Method:
    from workbench.methods.baselines import NoRAG

    return NoRAG(req.tools)


def _build_standard_rag(req: BuildRequest) -> Method:
    from workbench.methods.baselines import StandardRAG

    return StandardRAG(req.tools, k=req.options.k)


def _build_oracle(req: BuildRequest) -> Method:
    from workbench.methods.baselines import OracleRouting

    return OracleRouting(req.tools, k=req.options.k)


def _build_dtr(req: BuildRequest) -> Method:
    from workbench.methods.dtr import DTR

    return DTR(req.tools, settings=req.settings())


def _build_dense_rag(req: BuildRequest) -> Method:
    from workbench.methods.dense_rag import DenseRAG

    return DenseRAG(req.tools, settings=req.settings())


def _build_insemrag(req: BuildRequest) -> Method:
    from workbench.methods.insemrag import InSemRAG

    settings = req.settings()
    controller = build_controller(
        req.name,
        req.options,
        req.tools,
        settings.keep_threshold,
        controller_generator=req.controller_generator,
        distilled_adapter=req.distilled_adapter,
    )
    method = InSemRAG(req.tools, controller, settings)
    method.name = req.name
    return method


def _build_d2rag(req: BuildRequest) -> Method:
    from workbench.methods.d2rag import D2RAG
    from workbench.methods.utility import NoUtility, OracleUtility
    from workbench.uncertainty.seper import SeperSettings

    learned = req.learned
    assert learned is not None  # the entry's requires, checked by build_method
    if req.utility_fallback not in ("oracle", "none"):
        raise ConfigError(f"utility_fallback must be oracle or none, got {req.utility_fallback!r}", "build_method")
    seper = SeperSettings(samples=int(req.options.seper_samples), max_new_tokens=req.tools.max_new_tokens, seed=0)
    oracle = OracleUtility(settings=seper, label=req.options.utility_label)
    if req.name == "d2rag_oracle":
        utility = oracle
    elif learned.utility is not None:
        utility = learned.utility
    else:
        utility = oracle if req.utility_fallback == "oracle" else NoUtility()
    extra: dict[str, Any] = {"features": list(learned.features)}
    if learned.stats is not None:
        extra["stats"] = learned.stats
    method = D2RAG(
        req.tools,
        utility=utility,
        settings=req.settings(**extra),
        lars_scorer=learned.lars_scorer,
        policy=learned.policy(),
        ood_profile=learned.ood,
    )
    method.name = req.name
    return method


_INSEMRAG = "workbench.methods.insemrag:InSemRAGSettings"
_D2RAG = "workbench.methods.d2rag:D2RAGSettings"
_LEARNED = {"requires": ("classifier", "tau"), "requires_stages": ("calibrate", "classify"), "deferred": ("features",)}

METHOD_TABLE: dict[str, MethodEntry] = {
    entry.name: entry
    for entry in (
        MethodEntry("no_rag", "answer closed-book", _build_no_rag, family="no_rag"),
        MethodEntry(
            "standard_rag",
            "always retrieve the top k",
            _build_standard_rag,
            options=RetrievalOptions,
            family="standard_rag",
        ),
        MethodEntry(
            "oracle",
            "retrieve only when the closed-book answer is wrong (reads the gold answer)",
            _build_oracle,
            options=RetrievalOptions,
            gold=True,
            family="oracle",
        ),
        MethodEntry(
            "dtr",
            "DTR: retrieve iff the closed-book answer's normalised NLL >= tau; dual-path retrieval",
            _build_dtr,
            settings="workbench.methods.dtr:DTRSettings",
            family="dtr",
        ),
        MethodEntry(
            "dense_rag",
            "DENSE-RAG: semantic chunking and context refinement driven by degree-based semantic entropy",
            _build_dense_rag,
            settings="workbench.methods.dense_rag:DenseRAGSettings",
            family="dense_rag",
        ),
        MethodEntry(
            "d2rag",
            "D²-RAG: retrieve from calibrated uncertainty features; utility-aware contrastive decoding (learned"
            " utility)",
            _build_d2rag,
            settings=_D2RAG,
            options=UtilityOptions,
            family="d2rag",
            **_LEARNED,
        ),
        MethodEntry(
            "d2rag_oracle",
            "D²-RAG with the paper's ΔSePer utility (reads the gold answer)",
            _build_d2rag,
            settings=_D2RAG,
            options=UtilityOptions,
            gold=True,
            family="d2rag",
            **_LEARNED,
        ),
        MethodEntry(
            "insemrag",
            "InSemRAG: a controller enriches, weights, refines, repairs and audits the retrieval",
            _build_insemrag,
            settings=_INSEMRAG,
            options=ControllerOptions,
            family="insemrag",
        ),
        MethodEntry(
            "insemrag_distilled",
            "InSemRAG with the distilled controller by default",
            _build_insemrag,
            settings=_INSEMRAG,
            options=ControllerOptions,
            defaults={"controller": "distilled"},
            family="insemrag",
        ),
    )
}
"""Every method ``build_method`` knows, baselines first. ``d2rag`` uses the learned utility predictor (when none
was fitted: ``utility_fallback`` decides); ``d2rag_oracle`` always uses the paper's ΔSePer (gold answer), for the
side-by-side. ``insemrag_distilled`` is InSemRAG whose controller defaults to ``distilled`` (the run's ``distill``
output unless ``controller_model`` names one), so one evaluation puts the prompted and the distilled controller side
by side on the same questions."""

METHODS: tuple[str, ...] = tuple(METHOD_TABLE)
"""Every method name, in the table's order."""

INSEMRAG_METHODS: tuple[str, ...] = tuple(n for n, e in METHOD_TABLE.items() if e.family == "insemrag")
"""The InSemRAG variants (same settings and options; they differ in the default ``controller``)."""

GOLD_METHODS = frozenset(n for n, e in METHOD_TABLE.items() if e.gold)
"""Methods that read the gold answer (evaluation only, never in a bundle)."""


def settings_class(name: str) -> type | None:
    """The settings dataclass of method ``name`` (None for the baselines)."""
    return METHOD_TABLE[name].settings_class()


def option_fields(entry: MethodEntry) -> list[Any]:
    """The :class:`dataclasses.Field` of every option of ``entry``: its settings', then its options' (with the
    variant's ``defaults`` laid over the fields' own)."""
    out = []
    for cls in (entry.settings_class(), entry.options):
        if cls is not None:
            for f in fields(cls):
                if f.name in entry.defaults:
                    f = _with_default(f, entry.defaults[f.name])
                out.append(f)
    return out


def _with_default(f: Any, default: Any) -> Any:
    """A copy of field ``f`` whose default is ``default``."""
    import copy

    out = copy.copy(f)
    out.default, out.default_factory = default, MISSING
    return out


# ------------------------------------------------------------------------------------------------------ checking
def _split(name: str, entry: MethodEntry, given: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """``given`` as (settings values, checked options instance); unknown keys and bad options are ConfigErrors
    whose ``where`` is the bad key (relative to the method's entry)."""
    cls = entry.settings_class()
    setting_names = {f.name for f in fields(cls)} if cls is not None else set()
    option_names = {f.name for f in fields(entry.options)} if entry.options is not None else set()
    unknown = [key for key in given if key not in setting_names | option_names]
    if unknown:
        known = ", ".join(sorted(setting_names | option_names)) or "none"
        raise ConfigError(f"unknown option(s) {sorted(unknown)} (known: {known})", str(unknown[0]))
    options = None
    if entry.options is not None:
        values = {**entry.defaults, **{k: v for k, v in given.items() if k in option_names}}
        options = entry.options(**values).validate(given)
    return {k: v for k, v in given.items() if k in setting_names}, options


def _settings(name: str, entry: MethodEntry, values: dict[str, Any]) -> Any:
    """``entry``'s settings class over ``values``, validated (a wrong kind of value reaching the dataclass is a
    ConfigError too); None for a method without settings."""
    cls = entry.settings_class()
    if cls is None:
        return None
    try:
        settings = cls(**values)
        if hasattr(settings, "validate"):
            settings.validate()
    except TypeError as exc:  # a value of the wrong kind reaching a dataclass
        raise ConfigError(f"bad option value: {exc}") from None
    return settings


def _located(name: str, exc: ConfigError, given: Mapping[str, Any]) -> ConfigError:
    """``exc`` placed in the recipe: ``evaluate.options.<name>.<key>`` when the last part of its ``where`` is a key
    the options give, else the method's entry (the ``where`` kept in the message when it says more)."""
    base = f"evaluate.options.{name}"
    where = str(exc.where or "")
    key = where.rsplit(".", 1)[-1]
    if where and key in given:
        return ConfigError(exc.what, f"{base}.{key}")
    if where in ("", name, f"evaluate.{name}", base) or where.startswith(f"{base}."):
        return ConfigError(exc.what, where if where.startswith(f"{base}.") else base)
    return ConfigError(f"{where}: {exc.what}", base)


def _parse(name: str, given: Any) -> tuple[MethodEntry, dict[str, Any], Any]:
    """The method's entry, settings values and checked options from its ``evaluate.options`` entry; every error a
    one-line ConfigError at its own key."""
    entry = METHOD_TABLE[name]
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise ConfigError(f"options must be a mapping of setting: value, got {given!r}", f"evaluate.options.{name}")
    try:
        values, options = _split(name, entry, given)
        checked = {k: v for k, v in values.items() if k not in entry.deferred}
        _settings(name, entry, checked)
    except ConfigError as exc:
        raise _located(name, exc, given) from None
    return entry, values, options


def method_settings(name: str, given: Mapping[str, Any] | None) -> Any:
    """Method ``name``'s validated settings from its options ``given`` (None for a method without settings; its
    deferred settings left at their defaults). Errors as :func:`check_options`'s."""
    entry, values, _ = _parse(name, given)
    return _settings(name, entry, {k: v for k, v in values.items() if k not in entry.deferred})


def check_options(methods: list[str], options: dict[str, Any]) -> None:
    """Check ``evaluate.methods`` and ``evaluate.options`` before anything runs: known method names, options only for
    known methods, every option a known setting with a valid value. Raises a one-line :class:`ConfigError` whose
    ``where`` is the bad option's key (``evaluate.options.<method>.<key>``), or the method's entry when no single
    given key is at fault."""
    unknown = [m for m in methods if m not in METHOD_TABLE]
    if unknown or not methods:
        raise ConfigError(f"unknown or no method(s) {unknown} (known: {', '.join(METHODS)})", "evaluate.methods")
    strays = sorted(set(options) - set(METHOD_TABLE))
    if strays:
        raise ConfigError(f"options for unknown method(s) {strays} (known: {', '.join(METHODS)})", "evaluate.options")
    for name, given in options.items():
        _parse(name, given)


# ------------------------------------------------------------------------------------------------------ template
def options_template(indent: int = 0) -> str:
    """Every method's options as commented YAML, one block per method of the table: ``key: default  # type —
    meaning`` (what ``workbench config`` prints under ``evaluate.options``)."""
    import yaml

    pad = "  " * indent
    lines = []
    for name, entry in METHOD_TABLE.items():
        keys = option_fields(entry)
        lines.append(f"{pad}# {name}:{'' if keys else ' {}'}  # {entry.summary}")
        hints: dict[str, Any] = {}
        for cls in (entry.settings_class(), entry.options):
            if cls is not None:
                hints.update(typing.get_type_hints(cls))
        for f in keys:
            default = f.default if f.default is not MISSING else f.default_factory()
            shown = yaml.safe_dump(to_plain(default), default_flow_style=True, width=10**9)
            shown = shown.strip().removesuffix("...").strip()
            text = f.metadata.get("doc", "")
            lines.append(f"{pad}#   {f.name}: {shown}  # {type_name(hints[f.name])} — {text}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------ building
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
    if name not in METHOD_TABLE:
        raise ConfigError(f"unknown method {name!r} (known: {', '.join(METHODS)})", "evaluate.methods")
    entry, values, opts = _parse(name, options or {})
    missing = [part for part in entry.requires if learned is None or getattr(learned, part) is None]
    if missing:
        stages = " and ".join(entry.requires_stages)
        raise ConfigError(f"{name} needs the {stages} stages before evaluate", "evaluate.methods")
    request = BuildRequest(
        name=name,
        entry=entry,
        tools=tools,
        values=values,
        options=opts,
        learned=learned,
        utility_fallback=utility_fallback,
        controller_generator=controller_generator,
        distilled_adapter=distilled_adapter,
    )
    try:
        return entry.build(request)
    except ConfigError as exc:  # a settings error seen only now (a deferred setting): at its own key
        if str(exc.where or "").startswith("evaluate.") or exc.where == "build_method":
            raise
        raise _located(name, exc, values) from None
