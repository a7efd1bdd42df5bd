"""Methods by name: the one table of every method the workbench can run, built from the method packages' specs, and
building any method from the run's tools, its typed settings and the learned parts it needs.

**The table.** :data:`METHOD_TABLE` holds one :class:`~workbench.methods.spec.MethodSpec` per method name, gathered
from :data:`BUILTIN_PACKAGES` (each package exports ``METHOD`` or ``METHODS``) and then from every entry point of the
``workbench.methods`` group (a third-party package: the entry point names a module exporting ``METHOD`` /
``METHODS``, or a spec or a sequence of specs). A plugin that fails to load or gives no spec is a one-line
:class:`ConfigError` naming the entry point; a name given twice is refused. :func:`refresh` rebuilds the table (after
installing a plugin in a running interpreter). Adding a method is adding a package; no other module names one. Every
option's type, default and meaning come from the spec's two dataclasses' fields (:func:`workbench.core.config.doc`);
:func:`options_template` prints them for ``workbench config``.

**Options.** :func:`configure` turns a method's ``evaluate.options`` entry into its :class:`MethodConfig` once: the
spec, its typed settings instance and its checked options instance. ``build_method(name, tools, options, learned)``
takes that config (or the raw mapping, configured here) and hands the typed settings to the spec's builder, which
does not validate them again. An error names the option's own key (``evaluate.options.dtr.tau``; the method's entry
when no single given key is at fault). ``learned`` holds what earlier stages fitted (D²-RAG's calibrators,
classifier, τ and utility predictor). The method implementations are imported only when built.

InSemRAG's controller options (``controller``, ``controller_model``, the prompted controller's caps) are in
:mod:`workbench.methods.insemrag.controller_options`; their public names are importable from here for the stages
that read them.
"""

from __future__ import annotations

import importlib
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from importlib.metadata import entry_points  # the table is built at import (refresh below): the plugins' entry points
from pathlib import Path
from typing import Any, Literal

import yaml

from workbench.core.config import to_plain, type_name
from workbench.core.errors import ConfigError
from workbench.methods.base import Method, Tools
from workbench.methods.baselines import RetrievalOptions
from workbench.methods.insemrag.controller_options import (
    CONTROLLER_TOKENS,
    CONTROLLERS,
    ControllerOptions,
    adapter_file,
    build_controller,
    resolve_controller_model,
    same_weights,
)
from workbench.methods.learned import LearnedParts
from workbench.methods.spec import BuildRequest, MethodSpec

__all__ = [
    "BUILTIN_PACKAGES",
    "CONTROLLERS",
    "CONTROLLER_TOKENS",
    "ENTRY_POINT_GROUP",
    "GOLD_METHODS",
    "INSEMRAG_METHODS",
    "METHODS",
    "METHOD_TABLE",
    "BuildRequest",
    "ControllerOptions",
    "LearnedParts",
    "MethodConfig",
    "MethodEntry",
    "MethodSpec",
    "RetrievalOptions",
    "adapter_file",
    "build_controller",
    "build_method",
    "check_method_names",
    "check_options",
    "configure",
    "decision_method",
    "default_method",
    "learned_keys",
    "method_spec",
    "missing_method",
    "option_fields",
    "options_template",
    "refresh",
    "resolve_controller_model",
    "same_weights",
    "settings_class",
    "uses_decision_policy",
]

MethodEntry = MethodSpec
"""The former name of a table entry (kept for code written against it)."""

BUILTIN_PACKAGES: tuple[str, ...] = (
    "workbench.methods.baselines",
    "workbench.methods.dtr",
    "workbench.methods.dense_rag",
    "workbench.methods.d2rag",
    "workbench.methods.insemrag",
    "workbench.methods.flare",
    "workbench.methods.dragin",
)
"""The built-in method packages, in the table's order (baselines first)."""

ENTRY_POINT_GROUP = "workbench.methods"
"""The entry-point group a third-party method package registers under."""


# ------------------------------------------------------------------------------------------------------ the table
def _specs_of(source: Any) -> list[MethodSpec]:
    """The specs ``source`` gives: a spec, a sequence of specs, or a module exporting ``METHOD`` / ``METHODS``."""
    if isinstance(source, MethodSpec):
        return [source]
    if isinstance(source, (list, tuple)):
        return list(source) if all(isinstance(s, MethodSpec) for s in source) else []
    found: list[MethodSpec] = []
    names = vars(source) if isinstance(source, types.ModuleType) else {}  # not getattr: a lazy package stays light
    for attribute in ("METHOD", "METHODS"):
        if attribute in names:
            found += _specs_of(names[attribute])
    return found


def _plugin_specs() -> list[MethodSpec]:
    """The specs of every ``workbench.methods`` entry point; a broken one is a one-line ConfigError naming it."""
    out: list[MethodSpec] = []
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        where = f"entry point {ENTRY_POINT_GROUP}:{point.name}"
        try:
            loaded = point.load()
        except Exception as exc:  # a plugin's import error, whatever it is, is the plugin's: name it
            raise ConfigError(f"method plugin {point.value} failed to load ({type(exc).__name__})", where) from None
        specs = _specs_of(loaded)
        if not specs:
            raise ConfigError(f"method plugin {point.value} gives no MethodSpec (METHOD or METHODS)", where)
        out += specs
    return out


def _table() -> dict[str, MethodSpec]:
    """The table: the built-in packages' specs, then the plugins'; a name given twice is a ConfigError."""
    table: dict[str, MethodSpec] = {}
    builtin = [spec for package in BUILTIN_PACKAGES for spec in _specs_of(importlib.import_module(package))]
    for spec in [*builtin, *_plugin_specs()]:
        if spec.name in table:
            raise ConfigError(f"method {spec.name!r} is given twice (by {spec.package} too)", "workbench.methods")
        table[spec.name] = spec
    return table


METHOD_TABLE: dict[str, MethodSpec] = {}
"""Every method ``build_method`` knows, baselines first, then the other built-ins, then the plugins."""

METHODS: tuple[str, ...] = ()
"""Every method name, in the table's order."""

INSEMRAG_METHODS: tuple[str, ...] = ()
"""The methods whose options choose a controller (InSemRAG's variants): those whose options class is
:class:`ControllerOptions`."""

GOLD_METHODS: frozenset[str] = frozenset()
"""Methods that read the gold answer (evaluation only, never in a bundle)."""


def refresh() -> dict[str, MethodSpec]:
    """Rebuild :data:`METHOD_TABLE` (in place) and the names derived from it from the built-in packages and the
    entry points installed now; returns the table."""
    global METHODS, INSEMRAG_METHODS, GOLD_METHODS
    table = _table()
    METHOD_TABLE.clear()
    METHOD_TABLE.update(table)
    METHODS = tuple(table)
    INSEMRAG_METHODS = tuple(n for n, e in table.items() if e.options is ControllerOptions)
    GOLD_METHODS = frozenset(n for n, e in table.items() if e.gold)
    return METHOD_TABLE


refresh()


def method_spec(name: str, where: str = "evaluate.methods") -> MethodSpec:
    """The spec of method ``name``; a ConfigError at ``where`` naming the known methods when there is none."""
    if name not in METHOD_TABLE:
        raise ConfigError(f"unknown method {name!r} (known: {', '.join(METHODS)})", where)
    return METHOD_TABLE[name]


def missing_method(name: str, package: str | None, where: str) -> ConfigError:
    """The one-line refusal of a bundle that names a method no installed package provides: which method, and
    which package to install (as the bundle recorded it, else unknown)."""
    hint = f"install the package {package!r}" if package else "install the package that provides it"
    return ConfigError(f"the bundle needs method {name!r}, which is not installed here: {hint}", where)


def uses_decision_policy(name: str) -> bool:
    """Whether method ``name`` decides with the run's fitted decision policy (calibrators, classifier and τ: its
    spec requires the ``classifier``); False for a name the table does not know."""
    spec = METHOD_TABLE.get(name)
    return spec is not None and "classifier" in spec.requires


def default_method(names: Iterable[str]) -> str:
    """The default of ``names`` (a bundle's or a run's methods, in order): the one of highest spec ``rank`` (the
    first among equals; a name the table does not know ranks 0). ValueError when ``names`` is empty."""
    names = list(names)
    if not names:
        raise ValueError("no method to choose from")
    return max(names, key=lambda n: (METHOD_TABLE[n].rank if n in METHOD_TABLE else 0, -names.index(n)))


def decision_method(names: Iterable[str] | None = None) -> str | None:
    """The method whose facts go with the fitted decision policy (the settings a shipped decision shows beside τ,
    the method a benchmark times on the decision path): the :func:`default_method` of those of ``names`` (default:
    the whole table) that use the decision policy; None when none does."""
    deciders = [n for n in (METHOD_TABLE if names is None else names) if uses_decision_policy(n)]
    return default_method(deciders) if deciders else None


def learned_keys(part: str) -> list[str]:
    """``<method>_<param>`` for every study parameter that sets learned part ``part`` (a spec's ``learned_params``),
    in the table's order: the keys under which a study's ``best_params.json`` holds a shipped value of it, and
    evaluate's ``summary.json`` the value it ran with (``tau``: D²-RAG's ``d2rag_tau``)."""
    return [
        f"{name}_{param}"
        for name, spec in METHOD_TABLE.items()
        for param, target in spec.learned_params.items()
        if target == part
    ]


def settings_class(name: str) -> type | None:
    """The settings dataclass of method ``name`` (None for the baselines)."""
    return METHOD_TABLE[name].settings_class()


def option_fields(entry: MethodEntry) -> list[Any]:
    """The :class:`dataclasses.Field` of every option of ``entry`` (:meth:`MethodSpec.option_fields`)."""
    return entry.option_fields()


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
    """``entry``'s settings class over ``values``, validated; None for a method without settings."""
    return entry.make_settings(values)


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


@dataclass(frozen=True)
class MethodConfig:
    """One method's ``evaluate.options`` entry, configured once: its ``spec``, the entry as ``given`` (what a run
    records and digests), the settings ``values`` among it, the typed ``settings`` instance made from them (None: no
    settings class, or a deferred setting is given and the builder makes them) and the checked ``options`` instance
    (None: no options class)."""

    name: str
    spec: MethodSpec
    values: dict[str, Any]
    settings: Any
    options: Any
    given: dict[str, Any] = field(default_factory=dict)

    def updated(self, given: Mapping[str, Any], where: str = "evaluate.methods") -> MethodConfig:
        """The config of the entry ``given``: this one when ``given`` is the entry it was made from (nothing is
        validated again), else :func:`configure` of ``given`` (a new source of values: a study's parameters, an
        ``evaluate.params`` file)."""
        given = dict(given)
        return self if given == self.given else configure(self.name, given, where)

    def checked_settings(self) -> Any:
        """The typed settings, or, when a deferred setting is given (the builder makes the settings then), the
        settings of the other values with the deferred ones at their defaults; None for a method without settings."""
        if self.settings is not None:
            return self.settings
        return self.spec.make_settings({k: v for k, v in self.values.items() if k not in self.spec.deferred})


def configure(name: str, given: Any, where: str = "evaluate.methods") -> MethodConfig:
    """Method ``name``'s :class:`MethodConfig` from its ``evaluate.options`` entry ``given``: unknown keys, bad
    options and bad settings are one-line ConfigErrors at their own key (``evaluate.options.<name>.<key>``);
    deferred settings are checked when built."""
    entry = method_spec(name, where)
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise ConfigError(f"options must be a mapping of setting: value, got {given!r}", f"evaluate.options.{name}")
    try:
        values, options = _split(name, entry, given)
        checked = {k: v for k, v in values.items() if k not in entry.deferred}
        settings = _settings(name, entry, checked)
    except ConfigError as exc:
        raise _located(name, exc, given) from None
    return MethodConfig(name, entry, values, settings if checked == values else None, options, dict(given))


def check_method_names(methods: list[str], options: Mapping[str, Any]) -> None:
    """``evaluate.methods`` names known methods (at least one) and ``evaluate.options`` only known methods; else a
    one-line :class:`ConfigError` at the key at fault."""
    unknown = [m for m in methods if m not in METHOD_TABLE]
    if unknown or not methods:
        raise ConfigError(f"unknown or no method(s) {unknown} (known: {', '.join(METHODS)})", "evaluate.methods")
    strays = sorted(set(options) - set(METHOD_TABLE))
    if strays:
        raise ConfigError(f"options for unknown method(s) {strays} (known: {', '.join(METHODS)})", "evaluate.options")


def check_options(methods: list[str], options: dict[str, Any]) -> dict[str, MethodConfig]:
    """Check ``evaluate.methods`` and ``evaluate.options`` before anything runs: known method names, options only for
    known methods (:func:`check_method_names`), every option a known setting with a valid value. Raises a one-line
    :class:`ConfigError` whose ``where`` is the bad option's key (``evaluate.options.<method>.<key>``), or the
    method's entry when no single given key is at fault. Returns the :class:`MethodConfig` of every method of
    ``methods`` and of every method given options (in that order), each configured once."""
    check_method_names(methods, options)
    return {name: configure(name, options.get(name)) for name in dict.fromkeys([*methods, *options])}


# ------------------------------------------------------------------------------------------------------ template
def options_template(indent: int = 0) -> str:
    """Every method's options as commented YAML, one block per method of the table: ``key: default  # type —
    meaning`` (what ``workbench config`` prints under ``evaluate.options``)."""

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
    options: MethodConfig | Mapping[str, Any] | None,
    learned: LearnedParts | None,
    *,
    utility_fallback: Literal["oracle", "none"] = "oracle",
    controller_generator: Callable[[str], Any] | None = None,
    distilled_adapter: str | Path | None = None,
) -> Method:
    """The method ``name`` ready to answer; ConfigError for an unknown name, option or missing learned part.

    ``options``: the method's :class:`MethodConfig` (:func:`configure`, made once where the recipe is read: its typed
    settings go to the builder as they are), or its raw options mapping (configured here).

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
    config = options if isinstance(options, MethodConfig) else configure(name, dict(options or {}))
    entry, values = config.spec, config.values
    missing = [part for part in entry.requires if learned is None or getattr(learned, part) is None]
    if missing:
        stages = " and ".join(entry.requires_stages)
        raise ConfigError(f"{name} needs the {stages} stages before evaluate", "evaluate.methods")
    request = BuildRequest(
        name=name,
        entry=entry,
        tools=tools,
        values=values,
        options=config.options,
        learned=learned,
        utility_fallback=utility_fallback,
        controller_generator=controller_generator,
        distilled_adapter=distilled_adapter,
        settings_instance=config.settings,
    )
    try:
        return entry.build(request)
    except ConfigError as exc:  # a settings error seen only now (a deferred setting): at its own key
        if str(exc.where or "").startswith("evaluate.") or exc.where == "build_method":
            raise
        raise _located(name, exc, values) from None
