"""The recipe: its schema, composed from the stage table, and loading with file:line errors.

A recipe is one YAML file in ``recipes/`` (or anywhere, by path). It is validated against :class:`RecipeConfig`:
unknown keys, wrong types and missing required values are errors that name the key, the file and the line.

What lives where: the run settings (:class:`RunSettings`) are here; the sections several stages read (generator,
embedder, data, retrieval, nli, report) are in :mod:`workbench.stages.settings.shared`; each stage's own section
and load check are the stage's, named by its entry in :data:`workbench.stages.registry.STAGES` (``settings``,
``check``, ``splits``); settings two stages must keep in agreement are :data:`workbench.stages.agreements.AGREEMENTS`.
:func:`recipe_schema` composes the schema from those (the stage table's order), :func:`load_recipe` runs the checks,
and ``workbench config [STAGE]`` prints the keys with their types, defaults and meanings (:func:`recipe_template`).
No stage module imports this one.
"""

from __future__ import annotations

import dataclasses
import string
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from workbench.core.config import (
    LocatedYAML,
    apply_overrides,
    build_dataclass,
    doc,
    load_yaml_file,
    to_plain,
    type_name,
)
from workbench.core.errors import ConfigError, WorkbenchError
from workbench.core.paths import recipes_dir
from workbench.core.settings import KeyFirstError, PairedKeyError, value_at
from workbench.stages.fit_utility.settings import INERT_UNDER_CLASSIFIER
from workbench.stages.registry import STAGES, StageSpec, validate_stage_list
from workbench.stages.settings.shared import (
    DataSection,
    EmbedderSection,
    GeneratorSection,
    NLISection,
    ReportSection,
    RetrievalSection,
    check_data_section,
    check_retrieval_section,
    check_split,
    dataset_splits,
    resolve_data_defaults,
    resolve_retrieval_backend,
)
from workbench.stages.tune_reader.settings import check_reader_adapter

__all__ = [
    "INERT_UNDER_CLASSIFIER",
    "DataSection",
    "EmbedderSection",
    "GeneratorSection",
    "LoadedRecipe",
    "NLISection",
    "RecipeConfig",
    "ReportSection",
    "RetrievalSection",
    "RunSettings",
    "builtin_recipes",
    "dataset_splits",
    "expand_dir",
    "find_recipe",
    "load_recipe",
    "recipe_schema",
    "recipe_template",
    "stage_template",
]


@dataclass
class RunSettings:
    """A recipe's identity, the stages it runs and its run settings; :class:`RecipeConfig` adds the sections."""

    name: str = doc("recipe name: names the run and report directories")
    stages: list[str] = doc("stages to run, in order (see `workbench stages`)")
    description: str = doc("one line shown by `workbench ls`", "")
    seed: int = doc("global seed: data splits, sampling, training", 0, minimum=0)
    threads: int = doc("torch CPU threads (0: torch's default)", 0, minimum=0)
    run_dir: str = doc(
        "run directory (config, logs, stage outputs, manifest); '{name}' is replaced. New, empty or a run's: a "
        "non-empty directory no run made is refused (`workbench run --adopt-run-dir` adopts it), so are /, the home "
        "directory and a git checkout's root",
        "artifacts/runs/{name}",
    )
    tracker: Literal["wandb", "none"] = doc(
        "experiment tracker: wandb (offline unless WANDB_MODE says otherwise) or none", "wandb"
    )
    log_level: Literal["debug", "info", "warning", "error"] = doc(
        "logging level of the console and the run log", "info"
    )

    @property
    def resolved_run_dir(self) -> Path:
        """``run_dir`` with ``{name}`` substituted (see :func:`expand_dir`)."""
        return expand_dir(self.run_dir, self.name, "run_dir")

    @property
    def resolved_report_dir(self) -> Path:
        """``report.dir`` with ``{name}`` substituted (see :func:`expand_dir`)."""
        return expand_dir(self.report.dir, self.name, "report.dir")  # type: ignore[attr-defined]


SHARED_SECTIONS: tuple[tuple[str, type, str], ...] = (
    ("generator", GeneratorSection, "the answering language model"),
    ("embedder", EmbedderSection, "the sentence embedder"),
    ("data", DataSection, "the QA dataset and corpus"),
    ("retrieval", RetrievalSection, "retrieval settings"),
    ("nli", NLISection, "the NLI / answer-equivalence judge"),
)
"""``(key, section, meaning)`` of the sections several stages read, before the stages' own sections."""

LAST_SECTIONS: tuple[tuple[str, type, str], ...] = (("report", ReportSection, "the report"),)
"""Shared sections after the stages' own (the report, written last)."""


def _stage_sections(stages: dict[str, StageSpec]) -> Iterator[tuple[str, type, str]]:
    """``(key, section, meaning)`` of every section a stage of ``stages`` owns, in the table's order."""
    for spec in stages.values():
        cls = spec.settings_class()
        if cls is not None and spec.section_key is not None:
            yield spec.section_key, cls, f"the '{spec.name}' stage"


def compose_schema(stages: dict[str, StageSpec]) -> type:
    """The recipe dataclass for the stage table ``stages``: :class:`RunSettings`, then one field per section (the
    shared ones, each stage's own in the table's order, the report). ConfigError when two stages own one key."""
    sections = [*SHARED_SECTIONS, *_stage_sections(stages), *LAST_SECTIONS]
    keys = [key for key, _, _ in sections]
    twice = sorted({key for key in keys if keys.count(key) > 1} | ({f.name for f in fields(RunSettings)} & set(keys)))
    if twice:
        raise ConfigError(f"more than one section under {', '.join(twice)}", "stage table")
    schema = dataclasses.make_dataclass(
        "RecipeConfig",
        [(key, cls, doc(meaning, cls())) for key, cls, meaning in sections],
        bases=(RunSettings,),
    )
    schema.__module__ = __name__
    schema.__doc__ = "A whole recipe: identity, the stages to run, run settings, and one section per component."
    return schema


def _schema_key(stages: dict[str, StageSpec]) -> tuple[tuple[str | None, str | None], ...]:
    return tuple((spec.section_key, spec.settings) for spec in stages.values())


RecipeConfig: Any = compose_schema(STAGES)
"""The recipe schema of the stage table as the package ships it (see :func:`recipe_schema`)."""
_SCHEMAS: dict[tuple[tuple[str | None, str | None], ...], type] = {_schema_key(STAGES): RecipeConfig}


def recipe_schema() -> type:
    """The recipe dataclass for the stage table as it is now (:data:`RecipeConfig` unless a stage was added to
    :data:`~workbench.stages.registry.STAGES` since import: a test's toy stage)."""
    key = _schema_key(STAGES)
    if key not in _SCHEMAS:
        _SCHEMAS[key] = compose_schema(STAGES)
    return _SCHEMAS[key]


def __getattr__(name: str) -> Any:
    """Each stage's section class by its name (``from workbench.recipe import CollectSection``) and the agreements
    names this module held before the stages owned their settings (``Agreement``, ``AGREEMENT_WHEN``,
    ``STAGE_AGREEMENTS``), resolved on first use (PEP 562)."""
    if name in ("Agreement", "AGREEMENT_WHEN", "STAGE_AGREEMENTS"):
        # the agreements table gathers the methods' rows, so it loads the method registry and its entry points:
        # imported when asked for, as load_checks does, so that importing the recipe module stays light
        from workbench.stages import agreements

        return {
            "Agreement": agreements.Agreement,
            "AGREEMENT_WHEN": agreements.AGREEMENT_WHEN,
            "STAGE_AGREEMENTS": agreements.AGREEMENTS,
        }[name]
    for spec in STAGES.values():
        if spec.settings_name == name:
            return spec.settings_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def expand_dir(template: str, name: str, key: str) -> Path:
    """``template`` with ``{name}`` replaced by the recipe ``name``. Any other placeholder (``{foo}``, ``{0}``,
    ``{name.attr}``, ``{name!r}``) or a lone brace raises a one-line :class:`ConfigError` naming ``key``; ``{{`` and
    ``}}`` stand for braces."""

    hint = "the only placeholder is {name} (write {{ and }} for braces)"
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:  # "Single '{' encountered in format string"
        raise ConfigError(f"{exc} in {template!r}: {hint}", key) from None
    for _, field, spec, conversion in parsed:
        if field is not None and (field != "name" or spec or conversion):
            raise ConfigError(f"unknown placeholder in {template!r}: {hint}", key)
    return Path(template.format(name=name))


@dataclass
class LoadedRecipe:
    """A validated recipe plus where it came from: the file, the name or path it was asked for by, and the
    ``key=value`` overrides applied to it (in order)."""

    config: Any
    source: Path
    located: LocatedYAML
    given: str = ""
    overrides: tuple[str, ...] = ()

    @property
    def command(self) -> str:
        """The ``workbench run`` command line that loads this recipe again (shell-quoted where needed)."""
        import shlex

        parts = ["workbench", "run", self.given or str(self.source), *self.overrides]
        return " ".join(shlex.quote(part) for part in parts)


def builtin_recipes() -> dict[str, Path]:
    """Built-in recipe names (file stems in ``recipes/``) mapped to their files."""
    root = recipes_dir()
    return {path.stem: path for path in sorted(root.glob("*.yaml"))} if root.is_dir() else {}


def find_recipe(name_or_path: str) -> Path:
    """A built-in recipe name or a YAML path → the file; an unknown name raises :class:`ConfigError`."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError("recipe file not found", str(path))
        return path
    recipes = builtin_recipes()
    if name_or_path not in recipes:
        known = ", ".join(recipes) or "none"
        raise ConfigError(f"unknown recipe '{name_or_path}' (built-in: {known})", "recipe")
    return recipes[name_or_path]


def load_recipe(name_or_path: str, overrides: list[str] | None = None) -> LoadedRecipe:
    """Find, parse, override and validate a recipe: the schema, the stage names and their order, then
    :func:`load_checks` (each error names the key and its file and line, or the command line for an override)."""
    source = find_recipe(name_or_path)
    located = load_yaml_file(source)
    if not isinstance(located.data, dict):
        raise ConfigError("a recipe must be a YAML mapping", str(source))
    if overrides:
        located = apply_overrides(located, overrides)
    config = build_dataclass(recipe_schema(), located.data, located)

    validate_stage_list(config.stages, located.where(("stages",)))
    backend_key = ("retrieval", "backend")
    try:
        resolve_retrieval_backend(config, backend_key in located.lines or backend_key in located.overridden)
    except ConfigError as exc:
        raise ConfigError(exc.what, f"{located.where(('retrieval', 'retriever'))}: {exc.where}") from None
    resolve_data_defaults(config)  # data.fractions: null → the fractions build_data splits by (they follow the stages)
    for check in load_checks(config):  # fail at load, not after the stages before the one that needs the setting ran
        try:
            check(config)
        except WorkbenchError as exc:
            key = tuple(str(exc.where or "stages").split("."))
            # a key=value override at or below the key (evaluate.options.dtr.tau=...) is where it came from
            below = any(k[: len(key)] == key for k in located.overridden)
            location = "command line" if below else located.where(key)
            if isinstance(exc, KeyFirstError):
                raise ConfigError(f"{exc.where}: {exc.what}", location) from None
            what = exc.with_other_at(_key_location(located, exc.other)) if isinstance(exc, PairedKeyError) else exc.what
            raise ConfigError(what, f"{location}: {exc.where}") from None
    return LoadedRecipe(config, source, located, name_or_path, tuple(overrides or ()))


def _key_location(located: LocatedYAML, dotted: str) -> str:
    """Where a dotted key's value came from: ``file:line``, ``command line``, or that it is the default (the file
    does not set it)."""
    key = tuple(dotted.split("."))
    if any(key[:end] in located.overridden for end in range(len(key), 0, -1)) or key in located.lines:
        return located.where(key)
    return f"its default, not set in {located.source}"


# --------------------------------------------------------------------------------------------- checks at load


def load_checks(config: Any) -> list[Callable[[Any], None]]:
    """What :func:`load_recipe` checks after the schema, in order: the run settings and the shared sections, the splits
    each stage reads, each stage's own check (in the recipe's order), what the methods ask of an external retrieval
    engine, the cross-stage agreements, and an answer-reader
    adapter as the generator. Each raises a ConfigError naming a dotted key (the error then gets its file and line),
    so a recipe that cannot finish fails before its first stage runs."""
    from workbench.stages.agreements import check_agreements
    from workbench.stages.engine_needs import check_engine_needs

    own = [check for name in config.stages if (check := STAGES[name].load_check()) is not None]
    return [
        _check_dirs,
        _check_numbers,
        _check_data,
        check_retrieval_section,
        _check_devices,
        _check_backend,
        _check_splits,
        *own,
        check_engine_needs,
        check_agreements,
        _check_reader_adapter,
    ]


def _check_numbers(config: Any) -> None:
    """No integer below its field's ``minimum`` (1 unless the field says otherwise: ``doc(..., minimum=0)``) anywhere;
    temperatures >= 0."""
    for key, value, minimum in _integers(config):
        if value < minimum:
            raise ConfigError(f"must be >= {minimum}, got {value}", key)
    for section in fields(config):
        value = getattr(config, section.name)
        for fld in fields(value) if is_dataclass(value) else ():
            number = getattr(value, fld.name)
            if fld.name.endswith("temperature") and not number >= 0:
                raise ConfigError(f"must be >= 0, got {number}", f"{section.name}.{fld.name}")


def _check_data(config: Any) -> None:
    """The data section (:func:`workbench.stages.settings.shared.check_data_section`): fractions, chunk overlap, the
    field mappings and the split column."""
    check_data_section(config)


def _integer_kind(tp: Any) -> str | None:
    """``"int"`` for ``int`` / ``int | None``, ``"list"`` for ``list[int]``, else None."""

    if tp is int:
        return "int"
    args = typing.get_args(tp)
    if typing.get_origin(tp) is list and args == (int,):
        return "list"
    if args and int in args and all(a in (int, type(None)) for a in args):
        return "int"
    return None


def _integers(obj: Any, prefix: str = "") -> list[tuple[str, int, int]]:
    """Every integer value of the config tree ``obj`` with its dotted key (list items under the list's key) and the
    smallest value its field accepts (its ``minimum`` metadata, else 1)."""

    out: list[tuple[str, int, int]] = []
    hints = typing.get_type_hints(type(obj))
    for fld in fields(obj):
        key, value = f"{prefix}{fld.name}", getattr(obj, fld.name)
        minimum = fld.metadata.get("minimum", 1)
        if is_dataclass(value):
            out.extend(_integers(value, f"{key}."))
        elif value is not None and _integer_kind(hints[fld.name]) == "int":
            out.append((key, value, minimum))
        elif value is not None and _integer_kind(hints[fld.name]) == "list":
            out.extend((key, item, minimum) for item in value)
    return out


def _check_backend(config: Any) -> None:
    """``generator.backend: openai`` needs a ``base_url`` and refuses, before any request, the features, methods and
    stages that only the in-process backend can serve (:mod:`workbench.stages.backend_needs`); ``embedder.backend:
    openai`` needs a ``base_url`` too."""
    from workbench.stages.backend_needs import check_in_process_only

    _check_served_section(config.embedder, "embedder")
    section = config.generator
    if section.backend != "openai":
        return
    _check_served_section(section, "generator")
    if section.top_logprobs < 0:
        raise ConfigError(f"must be >= 0, got {section.top_logprobs}", "generator.top_logprobs")
    check_in_process_only(config)


def _check_served_section(section: Any, name: str) -> None:
    """A section with ``backend: openai`` names its server (``base_url``, http or https) and sane client limits."""
    if section.backend != "openai":
        return
    if not section.base_url:
        raise ConfigError(f"{name}.backend: openai needs {name}.base_url (the server's URL)", f"{name}.base_url")
    if not str(section.base_url).startswith(("http://", "https://")):
        raise ConfigError(f"must start with http:// or https://, got {section.base_url!r}", f"{name}.base_url")
    if section.max_concurrency < 1 or section.retries < 0 or not section.timeout_s > 0:
        raise ConfigError("max_concurrency >= 1, retries >= 0, timeout_s > 0", name)


def _check_devices(config: Any) -> None:
    """The generator's, embedder's and NLI judge's device strings are ones torch can be given (their availability is
    checked when each model loads, so a run made on a GPU machine can still be exported on another)."""
    from workbench.backends.device import check_device

    check_device(config.generator.device, "generator.device")
    check_device(config.embedder.device, "embedder.device")
    check_device(config.nli.device, "nli.device")


def _check_splits(config: Any) -> None:
    """Every split a stage of the recipe reads (its ``splits`` keys in the stage table) exists in the dataset and can
    hold questions."""

    for stage in config.stages:
        for key in STAGES[stage].splits:
            value = value_at(config, key)
            for split in value if isinstance(value, list) else [value]:
                check_split(config, stage, key, split)


def _check_reader_adapter(config: Any) -> None:
    """An answer-reader adapter as ``generator.model`` was trained on articles this data configuration keeps in
    ``train`` (:func:`workbench.stages.tune_reader.check_reader_adapter`)."""

    check_reader_adapter(config)


def _check_dirs(config: Any) -> None:
    """run_dir and report.dir: no placeholder but {name} (the directories themselves are checked when a run starts,
    see :mod:`workbench.core.run_dirs`)."""
    config.resolved_run_dir  # noqa: B018 -- raises for a bad placeholder
    config.resolved_report_dir  # noqa: B018


def recipe_template(cls: type | None = None, indent: int = 0) -> str:
    """Every key of the schema (``cls``, default: :func:`recipe_schema`) as commented YAML:
    ``key: default  # type — meaning``; a field whose ``doc`` names a ``template`` gets that function's lines too."""

    cls = recipe_schema() if cls is None else cls
    lines: list[str] = []
    pad = "  " * indent
    hints = typing.get_type_hints(cls)
    for fld in fields(cls):
        text = fld.metadata.get("doc", "")
        tp = hints[fld.name]
        if is_dataclass(tp):
            lines.append(f"{pad}{fld.name}:  # {text}")
            lines.append(recipe_template(tp, indent + 1))
            continue
        if fld.default is not dataclasses.MISSING:
            default: Any = fld.default
        elif fld.default_factory is not dataclasses.MISSING:
            default = to_plain(fld.default_factory())
        else:
            lines.append(f"{pad}{fld.name}:  # {type_name(tp)}, REQUIRED — {text}")
            continue
        shown = yaml.safe_dump(default, default_flow_style=True, width=10**9).strip().removesuffix("...").strip()
        lines.append(f"{pad}{fld.name}: {shown}  # {type_name(tp)} — {text}")
        if "template" in fld.metadata:  # e.g. evaluate.options: each method's settings, from the method table
            lines.append(fld.metadata["template"](indent + 1))
    return "\n".join(lines)


def stage_template(stage: str) -> str:
    """The keys of one stage as commented YAML (``workbench config STAGE``): the section it owns, then the other
    sections its output depends on, named. ConfigError for an unknown stage."""
    if stage not in STAGES:
        raise ConfigError(f"unknown stage '{stage}' (known: {', '.join(STAGES)})", "workbench config")
    spec = STAGES[stage]
    schema = recipe_schema()
    meanings = {f.name: f.metadata.get("doc", "") for f in fields(schema)}
    hints = __import__("typing").get_type_hints(schema)
    own = [spec.section_key] if spec.section_key else [key for key in spec.sections if key in meanings]
    lines = []
    for key in own:
        lines += [f"{key}:  # {meanings[key]}", recipe_template(hints[key], 1)]
    others = [key for key in spec.sections if key not in own]
    if others:
        lines.append(f"# {stage} also reads: {', '.join(others)} (`workbench config` prints every section)")
    return "\n".join(lines)
