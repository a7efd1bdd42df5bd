"""The method contract: what a method package exports (``METHOD`` or ``METHODS``) so the registry can list, check,
build, study, export and report it without any other module naming it.

A method package (``workbench/methods/<name>/`` or a third-party package registered under the ``workbench.methods``
entry-point group) keeps its ``__init__`` light — its settings dataclass and its :class:`MethodSpec` — and imports its
implementation inside the spec's ``build`` only, so listing methods and loading a recipe stay fast.

This module imports nothing heavy: the registry, the tuning layer and the runtime all read it.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from workbench.core.errors import ConfigError

__all__ = ["AgreementRow", "BuildRequest", "MethodHooks", "MethodSpec", "ReplayRule", "Tunable", "lazy_exports"]


@dataclass(frozen=True)
class Tunable:
    """What a method parameter is to a study: its value ``kind`` (``float`` / ``int`` / ``str``), the bounds any value
    must lie in (``lowest`` / ``highest``, inclusive, None = open), whether it is a ``threshold`` (a parameter
    that only re-routes answers computed once: see :class:`ReplayRule`) and whether a study may draw it from the
    ``breakpoints`` the method's spec computes from its records (``{breakpoints: true}``)."""

    kind: str
    lowest: float | None = None
    highest: float | None = None
    threshold: bool = False
    breakpoints: bool = False


@dataclass(frozen=True)
class ReplayRule:
    """How a study replays a method's retrieval threshold without regenerating (:mod:`workbench.tuning.replay`).

    ``always``: the threshold at which the method retrieves for every question; ``always_options``: other options
    of that always-retrieve run; ``branch_steps``: the trace steps a question that does not retrieve still runs;
    ``read``: ``(steps by name, trace) -> (score, closed-book answer, retrieved-side decision)`` from one trace of
    the always-retrieve run (a :class:`~workbench.core.errors.DataError` when the trace cannot be replayed)."""

    always: float
    branch_steps: tuple[str, ...]
    read: Callable[[dict[str, dict[str, Any]], dict[str, Any]], tuple[float, str, bool]]
    always_options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AgreementRow:
    """A pair of settings of different stages that must agree because of a method, contributed by its spec to the one
    agreements table (:data:`workbench.stages.agreements.AGREEMENTS`; ``held_out``: to
    :data:`~workbench.stages.agreements.SPLIT_AGREEMENTS`). ``key`` / ``other`` / ``reason`` / ``relation`` as an
    ``Agreement``'s; it applies when every one of ``stages`` runs and the method is used by one of ``uses``
    (``evaluate``: in ``evaluate.methods``; ``export``: among the exported methods; ``study``: in
    ``study.methods``); ``when`` names that condition (the table's condition names)."""

    key: str
    other: str
    reason: str
    when: str
    stages: tuple[str, ...]
    uses: tuple[str, ...] = ("evaluate", "export", "study")
    relation: str = "equal"
    held_out: bool = False


@dataclass(frozen=True)
class MethodHooks:
    """What is method-specific in the pipeline's checks and in the study, called by the generic stages (each None
    when the method has nothing to add). ``config`` is the recipe view; none of these may import a stage.

    * ``check_study(config, space)`` — the recipe check when the method is in ``study.methods`` (``space``: its
      search space, the recipe's or the default);
    * ``check_params(config, path, params, exported)`` — an ``evaluate.params`` file for the method (``exported``:
      it goes into a bundle);
    * ``study_prepare(learned)`` — before the study: refuse what cannot be studied, and return a record of how the
      study runs the method, written under ``prepared_key`` in its parameters file and as
      ``<method>_<prepared_key>`` in ``best_params.json`` (None: nothing to record);
    * ``check_study_space(names, prepared)`` — the parameters of the space, against what ``study_prepare`` said.
    """

    check_study: Callable[[Any, Mapping[str, Any]], None] | None = None
    check_params: Callable[[Any, str, dict[str, Any], bool], None] | None = None
    study_prepare: Callable[[Any], dict[str, Any] | None] | None = None
    check_study_space: Callable[[Sequence[str], dict[str, Any] | None], None] | None = None
    prepared_key: str = "prepared"


@dataclass(frozen=True)
class BuildRequest:
    """What a :class:`MethodSpec`'s builder gets: the method's name, its spec, the run's tools, its typed
    ``settings`` (an instance of the spec's settings class, or None), its checked options (an instance of the spec's
    options class, or None), the learned parts and the caller's build arguments. ``values`` are the settings
    values as given; :meth:`with_settings` re-makes the settings with values known only now (a deferred setting)."""

    name: str
    entry: MethodSpec
    tools: Any
    values: dict[str, Any]
    options: Any
    learned: Any
    utility_fallback: str
    controller_generator: Callable[[str], Any] | None
    distilled_adapter: str | Path | None
    settings_instance: Any = None

    def settings(self, **extra: Any) -> Any:
        """The typed settings: the instance made at recipe load when nothing is added, else the spec's settings
        class over ``extra`` then the given values, validated (None when the method has no settings class)."""
        if not extra and self.settings_instance is not None:
            return self.settings_instance
        return self.entry.make_settings({**extra, **self.values})


@dataclass(frozen=True)
class MethodSpec:
    """Every fact about one method (or one variant of it), in the method's own package.

    * ``name`` / ``summary`` / ``family`` — its key in ``evaluate.methods``, one line for ``workbench config``, and
      the method its variants share (a method and its ``_oracle`` or ``_distilled`` twin share one family).
    * ``build`` — ``BuildRequest -> Method``; imports the implementation (heavy) only when called.
    * ``settings`` — its settings dataclass (types, bounds in ``validate()``, defaults, the paper's defaults in its
      docstring), or a function returning it (a package whose settings import something heavy stays light);
      ``options`` — the dataclass of its other options (``validate(given) -> options``); ``defaults`` —
      option defaults this variant changes; ``deferred`` — settings known only after a later stage (checked when
      built).
    * ``requires`` / ``requires_stages`` — the learned parts (attributes of
      :class:`~workbench.methods.learned.LearnedParts`) it cannot run without and the stages that make them.
    * ``gold`` — it reads the gold answer (evaluation only, never exported in a bundle).
    * ``tunable`` / ``space`` — what a study may tune (:class:`Tunable` by parameter) and the space it gets when the
      recipe names none; ``replay`` — how its threshold is replayed (None: every trial runs the method);
      ``learned_params`` — study parameters that set a learned part rather than an option (parameter ->
      :class:`~workbench.methods.learned.LearnedParts` attribute: D²-RAG's ``tau``); ``breakpoints`` — ``records
      -> values``: the only values of its ``breakpoints`` parameter a study needs to try, from a run's trace
      records (DENSE-RAG's θ).
    * ``decide`` — its one retrieval decision rule, ``(score, tau) -> retrieve`` (scalars or numpy arrays): the
      method, the runtime, the study's replays and the bundle's decision records all call it; ``decision_score`` —
      ``(stats, settings) -> score``: the score ``decide`` reads, from one question's stats (those named in
      ``decision_stats``) and the method's typed settings, when the stats graph gives it (``workbench score``
      decides with it; None: the score comes from the method's own pipeline).
    * ``fixed_retrieve`` — the retrieval decision of a method that makes the same one for every question (No-RAG:
      never, Standard RAG: always; None: it decides per question). ``record_decision`` — ``(built method, question,
      contexts) -> decision``: what the built method decides for a logged question (and its retrieved
      ``contexts``, when ``record_needs`` names them) through the functions its own answer path calls, as a JSON
      mapping with ``retrieve`` (DENSE-RAG's triage of the contexts, InSemRAG's controller decisions on the
      question); ``workbench score`` reports it (None: nothing to decide from a record).
    * ``needs`` — the generator capabilities it needs beyond generation
      (:mod:`workbench.backends.capabilities` names).
    * ``rank`` — the default method of a bundle or a run is the one of highest rank (the first among equals).
    * ``package`` — the distribution that provides it (named when a bundle needs a method that is not installed).
    * ``hooks`` — what is method-specific in the stages' checks and in the study (:class:`MethodHooks`);
      ``agreements`` — the cross-stage settings the method makes agree (:class:`AgreementRow`); ``report`` —
      ``evaluate_dir -> markdown lines``: its own section of the evaluate report (after the methods table).
    * ``gold_free_twin`` — a ``gold`` variant's gold-free twin, exported in its place (the learned-utility variant
      of a method whose oracle variant reads the gold answer).
    * ``decision_settings`` — of a method that uses the decision policy: the settings a shipped decision shows
      beside τ, with who set them (D²-RAG's ``alpha_pos`` / ``alpha_neg``: :mod:`workbench.bundle.shipped`).
    """

    name: str
    summary: str
    build: Callable[[BuildRequest], Any]
    settings: type | Callable[[], type] | None = None
    options: type | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    requires_stages: tuple[str, ...] = ()
    deferred: tuple[str, ...] = ()
    gold: bool = False
    family: str = ""
    tunable: Mapping[str, Tunable] = field(default_factory=dict)
    space: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    replay: ReplayRule | None = None
    learned_params: Mapping[str, str] = field(default_factory=dict)
    breakpoints: Callable[[Sequence[dict[str, Any]]], list[float]] | None = None
    decide: Callable[[Any, Any], Any] | None = None
    decision_score: Callable[[Mapping[str, Any], Any], float] | None = None
    decision_stats: tuple[str, ...] = ()
    fixed_retrieve: bool | None = None
    record_decision: Callable[[Any, str, Sequence[str] | None], Mapping[str, Any]] | None = None
    record_needs: tuple[str, ...] = ()
    needs: frozenset[str] = frozenset()
    rank: int = 0
    package: str = "workbench"
    hooks: MethodHooks = field(default_factory=MethodHooks)
    agreements: tuple[AgreementRow, ...] = ()
    report: Callable[[Path], list[str]] | None = None
    gold_free_twin: str | None = None
    decision_settings: tuple[str, ...] = ()

    def settings_class(self) -> type | None:
        """The settings dataclass (imported now when the spec holds a function returning it), or None."""
        if self.settings is None or isinstance(self.settings, type):
            return self.settings
        return self.settings()

    def option_fields(self) -> list[Any]:
        """The :class:`dataclasses.Field` of every option: its settings', then its options' (with the variant's
        ``defaults`` laid over the fields' own)."""

        out = []
        for cls in (self.settings_class(), self.options):
            if cls is not None:
                for f in fields(cls):
                    if f.name in self.defaults:
                        f = copy.copy(f)
                        f.default, f.default_factory = self.defaults[f.name], MISSING
                    out.append(f)
        return out

    def keys(self) -> list[str]:
        """Every option key the method takes: its settings' fields, then its options' fields."""
        return [f.name for f in self.option_fields()]

    def make_settings(self, values: Mapping[str, Any]) -> Any:
        """The settings class over ``values``, validated (a value of the wrong kind reaching the dataclass is a
        :class:`~workbench.core.errors.ConfigError` too); None for a method without settings."""

        cls = self.settings_class()
        if cls is None:
            return None
        try:
            made = cls(**values)
            if hasattr(made, "validate"):
                made.validate()
        except TypeError as exc:  # a value of the wrong kind reaching a dataclass
            raise ConfigError(f"bad option value: {exc}") from None
        return made


def lazy_exports(package: str, *modules: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) for a method package whose ``__init__`` stays light: a name the package
    does not define is looked up, on first use, in its ``modules`` (submodule names, in order) — so
    ``from workbench.methods.dtr import DTR`` works without ``import workbench.methods.dtr`` loading the
    implementation."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        for module in modules:
            loaded = importlib.import_module(f"{package}.{module}")
            if name in getattr(loaded, "__all__", ()) or hasattr(loaded, name):
                return getattr(loaded, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
