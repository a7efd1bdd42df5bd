"""Recipe configuration: typed, documented dataclass schemas; YAML loading with line numbers; validation.

A recipe is a YAML mapping validated against :class:`workbench.recipe.RecipeConfig` (a tree of plain
dataclasses). Each dataclass field carries its documentation in ``field(metadata={"doc": ...})``; the same text
is used by ``workbench validate`` errors and by the generated, commented recipe template.

Errors name the key, the file and the line: ``recipes/x.yaml:12: answer.max_new_tokens: expected int, got 'ten'``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

import yaml

from workbench.core.errors import ConfigError

T = TypeVar("T")


def doc(
    text: str,
    default: Any = MISSING,
    *,
    minimum: int | None = None,
    template: Callable[[int], str] | None = None,
    **kwargs: Any,
) -> Any:
    """A dataclass field with documentation: ``x: int = doc("what x means", 3)``.

    Omitting ``default`` makes the field required. Mutable defaults (lists, dicts, dataclasses) are copied per
    instance. ``minimum`` is the smallest value an integer field (or each item of an integer list) accepts when it
    is not 1, the default minimum of a recipe's integers (checked at load; stored as the field's ``minimum``
    metadata). ``template`` is a function, ``template(indent) -> str``, that adds commented lines under the key
    in ``workbench config`` (e.g. each method's options).
    """
    metadata: dict[str, Any] = {"doc": text}
    if minimum is not None:
        metadata["minimum"] = minimum
    if template is not None:
        metadata["template"] = template
    if default is MISSING:
        return dataclasses.field(metadata=metadata, **kwargs)
    if isinstance(default, list | dict) or is_dataclass(default):
        value = default
        return dataclasses.field(default_factory=lambda: _copy_default(value), metadata=metadata, **kwargs)
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


def _copy_default(value: Any) -> Any:
    import copy

    return copy.deepcopy(value)


# ---------------------------------------------------------------------------------------------------------------
# YAML with line numbers, bounded
#
# A recipe is small (the largest built-in one is 11 KB), so the loader refuses what no recipe needs and what would
# let a few bytes cost minutes or memory: a file over MAX_RECIPE_BYTES, a string over MAX_SCALAR_CHARS, more than
# MAX_VALUES values once aliases are expanded (a "billion laughs" alias bomb is 535 bytes), nesting deeper than
# MAX_DEPTH (a self-referencing alias included) and any tag outside plain YAML data (``!!python/name:...``, ``!foo``).
# Every refusal, like every syntax error, is one ConfigError line naming ``file:line``.

MAX_RECIPE_BYTES = 256 * 1024
"""Largest recipe file read (bytes)."""
MAX_SCALAR_CHARS = 64 * 1024
"""Longest single value (a string, a number) in a recipe or an override."""
MAX_VALUES = 100_000
"""Most values (mappings, lists and scalars, each alias counted as the values it stands for) in one document."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and lists."""
MAX_OVERRIDE_CHARS = 64 * 1024
"""Longest ``key=value`` override."""

YAML_TAG = "tag:yaml.org,2002:"
SCALAR_TAGS = frozenset(YAML_TAG + name for name in ("null", "bool", "int", "float", "str", "timestamp"))
"""Scalar tags a recipe may hold: those plain YAML resolves by itself (an explicit ``!!str`` is one of them)."""


class LocatedYAML:
    """A parsed YAML document plus the line of every key path (``("answer", "max_new_tokens") -> 12``)."""

    def __init__(
        self,
        data: Any,
        lines: dict[tuple[str, ...], int],
        source: str,
        overridden: frozenset[tuple[str, ...]] = frozenset(),
    ) -> None:
        self.data = data
        self.lines = lines
        self.source = source
        self.overridden = overridden

    def where(self, path: tuple[str, ...]) -> str:
        """``file:line`` of the deepest known prefix of ``path`` (the file alone when nothing is known), or
        ``command line`` when the value came from a ``key=value`` override."""
        for end in range(len(path), 0, -1):
            if tuple(path[:end]) in self.overridden:
                return "command line"
        for end in range(len(path), 0, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return f"{self.source}:{line}"
        return self.source


def printable(text: str, limit: int = 120) -> str:
    """``text`` fit for a one-line message: control characters escaped, cut to ``limit`` characters."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[: limit + 1])
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _loader() -> type:
    # libyaml's parser is ~50x faster than the pure-Python one and caps nesting at 1000 levels by itself; both build
    # the same nodes with the same marks
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _compose(text: str, source: str) -> yaml.Node | None:
    """The node graph of one YAML document (aliases still shared, so composing a bomb is cheap); ConfigError when
    malformed."""
    try:
        return yaml.compose(text, Loader=_loader())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context = getattr(exc, "context", None)  # e.g. "while scanning a quoted scalar"
        said = f"{problem} ({context})" if context else problem
        raise ConfigError(f"malformed YAML: {printable(said, 200)}", where) from None
    except RecursionError:  # the pure-Python parser on deep nesting
        raise ConfigError(f"malformed YAML: nested deeper than {MAX_DEPTH} levels", source) from None


def _short_tag(tag: str) -> str:
    return "!!" + tag[len(YAML_TAG) :] if tag.startswith(YAML_TAG) else tag


class _Builder:
    """Turns a composed node graph into plain dicts / lists / scalars within the limits above, recording the line
    of every key path when ``lines`` is given (overrides have none: their place is the command line)."""

    def __init__(self, source: str, lines: dict[tuple[str, ...], int] | None = None) -> None:
        self.source = source
        self.lines = lines
        self.values = 0
        self.constructor = yaml.constructor.SafeConstructor()

    def where(self, node: yaml.Node) -> str:
        return f"{self.source}:{node.start_mark.line + 1}" if self.lines is not None else self.source

    def build(self, node: yaml.Node, path: tuple[str, ...] = (), depth: int = 0) -> Any:
        """The value of ``node``; ConfigError (one line, ``file:line``) past a limit or on a tag outside plain data."""
        self.values += 1
        if self.values > MAX_VALUES:
            raise ConfigError(
                f"more than {MAX_VALUES} values once aliases are expanded (an alias bomb?): a recipe holds far fewer",
                self.where(node),
            )
        if depth > MAX_DEPTH:
            raise ConfigError(
                f"nested deeper than {MAX_DEPTH} levels (or an alias that contains itself)", self.where(node)
            )
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, depth)
        if isinstance(node, yaml.SequenceNode):
            self._check_tag(node, YAML_TAG + "seq")
            return [self.build(item, path, depth + 1) for item in node.value]
        return self._scalar(node)

    def _check_tag(self, node: yaml.Node, expected: str) -> None:
        if node.tag != expected:
            self._refuse_tag(node)

    def _refuse_tag(self, node: yaml.Node) -> None:
        raise ConfigError(
            f"unsupported YAML tag '{printable(_short_tag(node.tag))}': a recipe holds plain mappings, lists, "
            "strings, numbers, booleans and nulls",
            self.where(node),
        )

    def _mapping(self, node: yaml.MappingNode, path: tuple[str, ...], depth: int) -> dict[str, Any]:
        self._check_tag(node, YAML_TAG + "map")
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise ConfigError("a key must be a plain value, not a list or a mapping", self.where(key_node))
            key = str(self._scalar(key_node))
            sub = (*path, key)
            if key in out:
                raise ConfigError(f"duplicate key '{printable('.'.join(sub))}'", self.where(key_node))
            if self.lines is not None:
                self.lines[sub] = key_node.start_mark.line + 1
            out[key] = self.build(value_node, sub, depth + 1)
        return out

    def _scalar(self, node: yaml.Node) -> Any:
        if node.tag not in SCALAR_TAGS:
            self._refuse_tag(node)
        if len(node.value) > MAX_SCALAR_CHARS:
            raise ConfigError(
                f"a value of {len(node.value)} characters: at most {MAX_SCALAR_CHARS} are read", self.where(node)
            )
        try:
            return self.constructor.construct_object(node)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:  # e.g. a timestamp such as 2024-13-45
            shown = printable(repr(node.value), 80)
            raise ConfigError(f"cannot read value {shown}: {printable(str(exc))}", self.where(node)) from None


def parse_yaml(text: str, source: str) -> LocatedYAML:
    """Parse YAML text, recording line numbers.

    Syntax errors, duplicate keys, tags outside plain data and the limits above (:data:`MAX_RECIPE_BYTES`,
    :data:`MAX_SCALAR_CHARS`, :data:`MAX_VALUES`, :data:`MAX_DEPTH`) raise a one-line :class:`ConfigError` naming
    ``source:line``; no input makes parsing slow or large.
    """
    if len(text) > MAX_RECIPE_BYTES:
        raise ConfigError(f"{len(text)} characters: a recipe holds at most {MAX_RECIPE_BYTES} bytes", source)
    node = _compose(text, source)
    lines: dict[tuple[str, ...], int] = {}
    if node is None:
        return LocatedYAML({}, lines, source)
    data = _Builder(source, lines).build(node)
    return LocatedYAML(data, lines, source)


def load_yaml_file(path: str | Path) -> LocatedYAML:
    """Read and parse a YAML file; a missing, unreadable or over-large (:data:`MAX_RECIPE_BYTES`) file raises
    :class:`ConfigError` before it is parsed."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_RECIPE_BYTES + 1)  # never more: a 10 MB file is refused without reading it all
    except FileNotFoundError:
        raise ConfigError("file not found", str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read file ({exc.__class__.__name__})", str(path)) from None
    if len(raw) > MAX_RECIPE_BYTES:
        raise ConfigError(f"file larger than {MAX_RECIPE_BYTES} bytes: too large for a recipe", str(path))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read file ({exc.__class__.__name__})", str(path)) from None
    return parse_yaml(text, str(path))


# ---------------------------------------------------------------------------------------------------------------
# Overrides


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """Parse one ``dotted.key=value`` override; the value is read as YAML (``3``, ``true``, ``[a, b]``, ``x``).

    A value that is not valid YAML is kept as the text given; one that breaks the recipe limits (a tag outside plain
    data, an alias bomb, over :data:`MAX_OVERRIDE_CHARS` characters) raises a one-line :class:`ConfigError`.
    """
    if len(text) > MAX_OVERRIDE_CHARS:
        raise ConfigError(
            f"an override of {len(text)} characters: at most {MAX_OVERRIDE_CHARS} are read", "command line"
        )
    if "=" not in text:
        raise ConfigError(f"override '{printable(text)}' is not of the form key=value", "command line")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override '{printable(text)}' has an empty key", "command line")
    return tuple(key.split(".")), _override_value(raw)


def _override_value(raw: str) -> Any:
    if not raw.strip():
        return ""
    try:
        node = _compose(raw, "command line")
    except ConfigError:
        return raw  # not YAML (e.g. "a: b: c"): the text as given
    return None if node is None else _Builder("command line").build(node)


def apply_overrides(located: LocatedYAML, overrides: list[str]) -> LocatedYAML:
    """Return a copy of ``located`` with ``key=value`` overrides applied (their location is the command line)."""
    import copy

    data = copy.deepcopy(located.data) if isinstance(located.data, dict) else {}
    lines = dict(located.lines)
    overridden = set(located.overridden)
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                dotted = printable(".".join(path))
                raise ConfigError(f"cannot set '{dotted}': '{printable(part)}' is not a section", "command line")
            node = child
        node[path[-1]] = value
        overridden.add(path)
    return LocatedYAML(data, lines, located.source, frozenset(overridden))


# ---------------------------------------------------------------------------------------------------------------
# Validation into dataclasses


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    if origin is list:
        (item,) = get_args(tp) or (Any,)
        return f"list[{_type_name(item)}]"
    if origin is dict:
        return "mapping"
    if tp is type(None):
        return "null"
    if is_dataclass(tp):
        return "section"
    return getattr(tp, "__name__", str(tp))


def type_name(tp: Any) -> str:
    """A short human name for a type annotation (used in error messages and generated docs)."""
    return _type_name(tp)


class _Mismatch(Exception):
    pass


def _coerce(value: Any, tp: Any, path: tuple[str, ...], located: LocatedYAML) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if is_dataclass(tp):
        if not isinstance(value, dict):
            raise _Mismatch
        return build_dataclass(tp, value, located, path)
    if origin in (typing.Union, types.UnionType):
        for option in get_args(tp):
            try:
                return _coerce(value, option, path, located)
            except _Mismatch:
                continue
        raise _Mismatch
    if tp is type(None):
        if value is None:
            return None
        raise _Mismatch
    if origin is Literal:
        if value in get_args(tp):
            return value
        raise _Mismatch
    if origin is list:
        if not isinstance(value, list):
            raise _Mismatch
        (item,) = get_args(tp) or (Any,)
        return [_coerce(v, item, path, located) for v in value]
    if origin is dict:
        if not isinstance(value, dict):
            raise _Mismatch
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise _Mismatch
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Mismatch
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise _Mismatch
    if tp is str:
        if isinstance(value, str):
            return value
        raise _Mismatch
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise _Mismatch


def build_dataclass(cls: type[T], data: dict[str, Any], located: LocatedYAML, path: tuple[str, ...] = ()) -> T:
    """Validate ``data`` against dataclass ``cls`` and build it.

    Raises :class:`ConfigError` for an unknown key (with the known keys listed), a wrong type, or a required key
    that is missing; the error names the dotted key and ``file:line``.
    """
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls) if f.init}
    for key in data:
        if key not in known:
            dotted = printable(".".join((*path, key)))
            choices = ", ".join(sorted(known))
            raise ConfigError(f"unknown key '{dotted}' (known here: {choices})", located.where((*path, key)))
    kwargs: dict[str, Any] = {}
    for name, fld in known.items():
        sub = (*path, name)
        if name not in data:
            if fld.default is MISSING and fld.default_factory is MISSING:
                raise ConfigError(f"missing required key '{'.'.join(sub)}'", located.where(path))
            continue
        value = data[name]
        tp = hints[name]
        try:
            kwargs[name] = _coerce(value, tp, sub, located)
        except _Mismatch:
            shown = printable(repr(value), 200) if not isinstance(value, dict) else "a mapping"
            raise ConfigError(f"'{'.'.join(sub)}' expects {_type_name(tp)}, got {shown}", located.where(sub)) from None
    try:
        obj = cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(str(exc), located.where(path)) from None
    return obj


def to_plain(obj: Any) -> Any:
    """A dataclass tree as plain dicts / lists / scalars (what gets written as the resolved config)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, list | tuple):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj


def dump_yaml(obj: Any) -> str:
    """Plain YAML for a dataclass tree or mapping, keys in declaration order."""
    return yaml.safe_dump(to_plain(obj), sort_keys=False, allow_unicode=True)
