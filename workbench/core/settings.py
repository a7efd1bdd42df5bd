"""What a stage's settings module needs to check a loaded recipe, with no import of the recipe itself.

A stage's settings (its section dataclass and its load check, :mod:`workbench.stages.settings`) sit below
:mod:`workbench.recipe`, which composes the recipe schema from them; so a check sees the loaded recipe as a
:class:`RecipeView` (run settings plus one attribute per section) and names keys by dotted path (:func:`value_at`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, Protocol

from workbench.core.errors import ConfigError


class KeyFirstError(ConfigError):
    """A load check's error that the recipe loader reports at the key's file and line with the key leading the message
    (``r.yaml:6: evaluate.options.dtr.tauu: unknown option(s)``), as a method's options always were; any other
    ConfigError of a check is reported as ``r.yaml:6: <key>: <message>`` with the key in ``where``."""


class PairedKeyError(ConfigError):
    """A load check's error about two keys that must agree (:mod:`workbench.stages.agreements`): ``where`` is the first
    key, ``other`` the second, which the message names. The recipe loader reports both at their file and line
    (``r.yaml:12: study.split: 'test' is also evaluate.split: ... (evaluate.split: r.yaml:30)``, by
    :meth:`with_other_at`)."""

    def __init__(self, what: str, where: str, other: str) -> None:
        super().__init__(what, where)
        self.other = other

    def with_other_at(self, location: str) -> str:
        """The message followed by where the other key's value came from: ``<what> (<other>: <location>)``."""
        return f"{self.what} ({self.other}: {location})"


class RecipeView(Protocol):
    """A loaded recipe as a stage's check or code reads it: the run settings below, and every section by its key
    (``config.collect``, ``config.generator``, ...), each a dataclass of that section's settings."""

    name: str
    stages: list[str]
    seed: int

    def __getattr__(self, key: str) -> Any: ...


def value_at(config: Any, key: str) -> Any:
    """The value at a dotted ``key`` of ``config`` (``"collect.splits"``); AttributeError for a key it lacks."""
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    return value


def check_own_section(section_key: str, validate: Callable[[Any], None], config: RecipeView) -> None:
    """Run ``validate`` on the section ``section_key`` of ``config``, the error naming a key of that section.

    ``validate`` takes the section alone and raises a one-line :class:`ConfigError`; when its key is a bare field name
    (``"features"``) it becomes ``<section_key>.features``, any other key outside the section becomes the section.
    """
    section = getattr(config, section_key)
    try:
        validate(section)
    except ConfigError as exc:
        where = str(exc.where or section_key)
        if not where.startswith(f"{section_key}."):
            names = {f.name for f in fields(section)}
            where = f"{section_key}.{where}" if where in names else section_key
        raise ConfigError(exc.what, where) from None
