"""What a stage's report section is: the contract between a stage's ``report`` (on its
:class:`~workbench.stages.spec.StageSpec`) and the ``report`` stage that places the sections in the run's report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SectionInput:
    """What a stage's report section reads: ``stage_dir``, the stage's finished output; ``out_dir``, the report
    folder being written (the section draws its PNGs there); ``config``, the run's recipe view; ``stage_output``,
    another stage's finished output by name (None when the run did not make it)."""

    stage_dir: Path
    out_dir: Path
    config: Any
    stage_output: Callable[[str], Path | None]


@dataclass(frozen=True)
class Section:
    """A stage's part of the run's report: ``lines``, its Markdown in the report's body, and ``setup``, lines for the
    report's "Setup" list near the top (empty for most stages)."""

    lines: list[str]
    setup: list[str] = field(default_factory=list)


SectionWriter = Callable[[SectionInput], Section]
"""A stage's ``report``: its section of the run's report from its output."""
