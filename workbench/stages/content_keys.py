"""What a stage reads from files named by its settings, as it enters the stage's cache key: their contents.

A stage key holds its config sections (:func:`workbench.stages.runner.stage_key`), so a setting that names a file
holds only the *path*: edit the file, re-run, and the stage stays cached with an output made from the old contents
(an ``evaluate.params`` file edited after the run: ``evaluate`` skipped, and ``export`` shipping a τ evaluate never
ran). Datasets were always keyed by content; every path-valued setting is now keyed the same way.

:data:`PATH_SETTINGS` declares the settings whose value may be a local path (a file or a directory): the corpus,
the dataset, the models and adapters (a local model directory, an ``adapter.json`` or its directory), the study
parameter files. :func:`path_digests` gives, for the settings of the sections a stage is keyed on, the
:func:`~workbench.core.hashing.path_sha256` of every value that is an existing local path; a value that is not one
(an embedded name, a hub id, ``wiki``) enters the key as the string it already is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.assets import EMBEDDED_ADAPTERS, EMBEDDED_EMBEDDERS, EMBEDDED_GENERATORS
from workbench.core.hashing import path_sha256


@dataclass(frozen=True)
class PathSetting:
    """A setting whose value may name a local file or directory: ``key`` is its dotted key (a ``*`` stands for any
    key at that level, e.g. every method of ``evaluate.options``), ``readers`` the stages that read the file (None:
    every stage keyed on the setting's section; a stage keyed on the section that never opens the file does not
    re-run when only the file changes), ``names`` the values that are names and never paths (``wiki``), ``model``
    whether the value is a model reference (an embedded model's name is never a path either)."""

    key: str
    readers: tuple[str, ...] | None = None
    names: tuple[str, ...] = ()
    model: bool = False

    @property
    def section(self) -> str:
        """The recipe section the setting lives in."""
        return self.key.split(".", 1)[0]


PATH_SETTINGS: tuple[PathSetting, ...] = (
    PathSetting("data.dataset", names=("wiki-qa",)),
    PathSetting("data.corpus", names=("wiki",)),
    PathSetting("generator.model", model=True),
    PathSetting("generator.tokenizer", model=True),
    PathSetting("embedder.model", model=True),
    PathSetting("nli.model", model=True),
    PathSetting("evaluate.params", readers=("evaluate",)),
    PathSetting("evaluate.options.*.controller_model", model=True),
    PathSetting("distill.base_model", model=True),
    PathSetting("distill_data.teacher", model=True),
)
"""Every setting whose value may be a local path, with the stages that read it (see :class:`PathSetting`)."""


def _values(plain: Any, parts: list[str], prefix: str) -> Iterable[tuple[str, Any]]:
    """``(dotted key, value)`` of every value at ``parts`` below ``plain`` (a ``*`` part matches every key)."""
    if not parts:
        yield prefix, plain
        return
    if not isinstance(plain, dict):
        return
    head, rest = parts[0], parts[1:]
    for key in sorted(plain) if head == "*" else [head]:
        if key in plain:
            yield from _values(plain[key], rest, f"{prefix}.{key}")


def _local_path(value: Any, setting: PathSetting) -> Path | None:
    """The existing local file or directory ``value`` names, or None (not a string, one of the setting's names, an
    embedded model's name, a hub id, a path that does not exist: the loader of that setting says so when used)."""
    if not isinstance(value, str) or not value or value in setting.names:
        return None
    if setting.model and (value in EMBEDDED_GENERATORS or value in EMBEDDED_EMBEDDERS or value in EMBEDDED_ADAPTERS):
        return None  # resolved as the embedded asset even when a same-named path exists (workbench.assets)
    path = Path(value).expanduser()
    return path if path.exists() else None


def path_digests(stage: str, sections: Iterable[str], plain: dict[str, Any]) -> dict[str, str]:
    """``{dotted key: sha256}`` of every local path named by a :data:`PATH_SETTINGS` setting of ``sections`` (the
    plain config ``plain``) that stage ``stage`` reads; list values are keyed per item (``evaluate.params[0]``)."""
    wanted = set(sections)
    out: dict[str, str] = {}
    for setting in PATH_SETTINGS:
        if setting.section not in wanted or (setting.readers is not None and stage not in setting.readers):
            continue
        for key, value in _values(plain, setting.key.split("."), ""):
            items = value if isinstance(value, list) else [value]
            for index, item in enumerate(items):
                path = _local_path(item, setting)
                if path is not None:
                    name = key.lstrip(".") + (f"[{index}]" if isinstance(value, list) else "")
                    out[name] = path_sha256(path)
    return out
