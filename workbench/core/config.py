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
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

import yaml

from workbench.core.errors import ConfigError

T = TypeVar("T")


def doc(text: str, default: Any = MISSING, **kwargs: Any) -> Any:
    """A dataclass field with documentation: ``x: int = doc("what x means", 3)``.

    Omitting ``default`` makes the field required. Mutable defaults (lists, dicts, dataclasses) are copied per
    instance.
    """
    metadata = {"doc": text}
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
# YAML with line numbers


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


def _unique_key_loader() -> type[yaml.SafeLoader]:
    class Loader(yaml.SafeLoader):
        pass

    return Loader


def parse_yaml(text: str, source: str) -> LocatedYAML:
    """Parse YAML text, recording line numbers; duplicate keys and syntax errors raise :class:`ConfigError`."""
    try:
        node = yaml.compose(text, Loader=_unique_key_loader())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"malformed YAML: {problem}", where) from None
    lines: dict[tuple[str, ...], int] = {}
    if node is None:
        return LocatedYAML({}, lines, source)
    data = _construct(node, (), lines, source)
    return LocatedYAML(data, lines, source)


def _construct(node: yaml.Node, path: tuple[str, ...], lines: dict, source: str) -> Any:
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = str(yaml.safe_load(yaml.serialize(key_node)))
            sub = (*path, key)
            if key in out:
                raise ConfigError(f"duplicate key '{'.'.join(sub)}'", f"{source}:{key_node.start_mark.line + 1}")
            lines[sub] = key_node.start_mark.line + 1
            out[key] = _construct(value_node, sub, lines, source)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, path, lines, source) for item in node.value]
    return yaml.safe_load(yaml.serialize(node))


def load_yaml_file(path: str | Path) -> LocatedYAML:
    """Read and parse a YAML file; a missing or unreadable file raises :class:`ConfigError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read file ({exc.__class__.__name__})", str(path)) from None
    return parse_yaml(text, str(path))


# ---------------------------------------------------------------------------------------------------------------
# Overrides


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """Parse one ``dotted.key=value`` override; the value is read as YAML (``3``, ``true``, ``[a, b]``, ``x``)."""
    if "=" not in text:
        raise ConfigError(f"override '{text}' is not of the form key=value", "command line")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override '{text}' has an empty key", "command line")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return tuple(key.split(".")), value


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
                raise ConfigError(f"cannot set '{'.'.join(path)}': '{part}' is not a section", "command line")
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
            dotted = ".".join((*path, key))
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
            shown = repr(value) if not isinstance(value, dict) else "a mapping"
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
