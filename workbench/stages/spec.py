"""What a recipe step is (:class:`StageSpec`): its name, what it reads, which config sections its output depends on,
where its run code, settings, load check and report section live. The stage table (:mod:`workbench.stages.registry`)
and the benchmark table (:mod:`workbench.bench.registry`) gather these from their packages."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StageSpec:
    """One recipe step.

    ``entry`` is ``"module:function"``, imported only when the stage runs; the function takes a
    :class:`workbench.stages.context.StageContext` and returns a flat dict of summary values. The cache key of the
    stage's output is the hash of ``name``, ``version``, the recipe seed, the config ``sections`` listed, the
    fingerprints of the assets in ``uses``, the contents of the local files those sections name
    (:mod:`workbench.stages.content_keys`), and the keys of the ``inputs`` stages. ``optional_inputs`` are read
    when the recipe runs them before this stage (a report covers whatever the run produced). ``cacheable=False``
    stages (cheap, with outputs outside the run directory) always run. ``multi_process`` stages take part in a
    multi-process launch (torchrun / srun, one process per device): ranks other than 0 run only them, writing
    nothing (:func:`workbench.stages.runner.run_recipe`); the stage itself lets only rank 0 write.

    ``resources`` are the kinds of the run's shared resources the stage uses
    (:class:`~workbench.stages.context.Resources`: ``generator``, ``controller_generator``, ``embedder``,
    ``retriever``, or a stage's own ``get`` name); before the stage runs the runner drops every other one and returns
    its memory, so memory a stage does not need is not held through it (a dropped resource is rebuilt by the next
    stage that uses it). Unrelated to ``uses`` (the assets the cache key fingerprints). ``trains``: the stage runs a
    training loop; a run holding such a stage has glibc map large allocations from its start on
    (:func:`workbench.core.memory.map_large_allocations`: a steady heap through training and the stages around it,
    a cost for sampling-heavy decoding, which runs without a training stage do not pay).

    What a stage owns of the recipe: ``settings`` is the dataclass of its section (keys, types, defaults, one-line
    meanings), which the recipe holds under ``section`` (the stage's name unless given; a stage that reads only
    shared or other stages' sections owns none). ``check`` is the stage's own load check, ``check(config)`` run by
    :func:`workbench.recipe.load_recipe` when the stage is in the recipe (a one-line ConfigError naming a dotted
    key). ``splits`` are the dotted keys naming the split(s) the stage reads from build_data (checked at load to
    exist and hold questions). All are imported only when used, and a settings module imports no stage code at
    import time (:mod:`workbench.stages.settings`), so loading or printing a recipe stays light. A stage package's
    spec (``workbench/stages/<name>/__init__.py``, ``workbench/bench/<name>/``) gives ``settings`` and ``check`` as
    the objects of its light settings module and ``entry`` as the ``"module:function"`` of its run code, imported
    when the stage runs; the rows not yet packaged give all three as ``"module:name"``. Settings two stages must
    keep equal are declared in :data:`workbench.stages.agreements.AGREEMENTS`.

    ``report`` is the stage's section of the run's report (a
    :data:`~workbench.reports.section.SectionWriter`: :class:`~workbench.reports.section.SectionInput` →
    :class:`~workbench.reports.section.Section`), given like ``entry`` as the ``"module:function"`` of the package's
    ``report.py`` (imported only when the ``report`` stage runs) or as the function itself; None when the stage's
    output has no section. The ``report`` stage places the sections of the stages it reads in the order of its
    ``optional_inputs``.
    """

    name: str
    summary: str
    entry: str
    version: int = 1
    resources: tuple[str, ...] = ()
    sections: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    optional_inputs: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    cacheable: bool = True
    multi_process: bool = False
    trains: bool = False
    settings: str | type | None = None
    section: str | None = None
    check: str | Callable[[Any], None] | None = None
    splits: tuple[str, ...] = ()
    report: str | Callable[[Any], Any] | None = None

    @property
    def section_key(self) -> str | None:
        """The recipe key of the section this stage owns (None when it owns none)."""
        return (self.section or self.name) if self.settings else None

    def settings_class(self) -> type | None:
        """Import and return the dataclass of the section this stage owns (None when it owns none)."""
        return _resolve(self.settings) if self.settings else None

    @property
    def settings_name(self) -> str | None:
        """The name of the section's dataclass, without importing it (None when the stage owns no section)."""
        if self.settings is None:
            return None
        return self.settings.rpartition(":")[2] if isinstance(self.settings, str) else self.settings.__name__

    @property
    def settings_module(self) -> str | None:
        """The dotted module holding the section's dataclass (None when the stage owns no section)."""
        if self.settings is None:
            return None
        return self.settings.partition(":")[0] if isinstance(self.settings, str) else self.settings.__module__

    @property
    def entry_module(self) -> str:
        """The dotted module holding the stage function (not imported)."""
        return self.entry.partition(":")[0]

    def load_check(self) -> Callable[[Any], None] | None:
        """Import and return the stage's own load check (None when it has none)."""
        return _resolve(self.check) if self.check else None

    def load_report(self) -> Callable[[Any], Any] | None:
        """Import and return the stage's report section writer (None when its output has no section)."""
        return _resolve(self.report) if self.report else None

    def inputs_in(self, stages: list[str]) -> tuple[str, ...]:
        """The stages this one reads in a recipe running ``stages``: its inputs, then its optional inputs that run."""
        return (*self.inputs, *(name for name in self.optional_inputs if name in stages))

    def load(self) -> Callable[[Any], dict[str, Any]]:
        """Import and return the stage function."""
        return _resolve(self.entry)


def _resolve(reference: Any) -> Any:
    """The object a ``"module:name"`` reference names (imported now); an object given as itself is returned."""
    if not isinstance(reference, str):
        return reference
    module, name = reference.split(":")
    return getattr(importlib.import_module(module), name)


def gather_specs(packages: tuple[str, ...]) -> dict[str, StageSpec]:
    """The specs of the stage packages named (dotted module names), by stage name in the packages' order: each
    package's ``SPECS``. Imports each package (its ``__init__`` and light settings module, never its run code)."""
    specs: dict[str, StageSpec] = {}
    for package in packages:
        for spec in importlib.import_module(package).SPECS:
            specs[spec.name] = spec
    return specs
