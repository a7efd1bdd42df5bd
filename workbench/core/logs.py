"""Logging and progress bars: one console (rich), an optional log file, a global quiet switch."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_STATE = {"quiet": False}
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def set_quiet(quiet: bool) -> None:
    """Globally hide progress bars and info-level console output (warnings and errors still show)."""
    _STATE["quiet"] = quiet


def is_quiet() -> bool:
    """Whether ``--quiet`` is in force."""
    return _STATE["quiet"]


def setup_logging(level: str = "info", log_file: str | Path | None = None) -> None:
    """Configure the ``workbench`` logger: a rich console handler and, when given, a plain-text file handler.

    Console level is ``level`` (raised to warning under quiet); the file always records ``level`` and above.
    Calling it again replaces the previous handlers (a new run gets a new log file).
    """
    from rich.logging import RichHandler

    numeric = LEVELS[level]
    logger = logging.getLogger("workbench")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    logger.setLevel(numeric)
    logger.propagate = False
    console = RichHandler(show_path=False, rich_tracebacks=False, markup=False)
    console.setLevel(max(numeric, logging.WARNING) if is_quiet() else numeric)
    logger.addHandler(console)
    if log_file is not None:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(log_file, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.setLevel(numeric)
        logger.addHandler(handler)


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate ``items`` behind a rich progress bar (elapsed and remaining time); silent under ``--quiet``."""
    if is_quiet():
        yield from items
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            progress.advance(task)


@contextlib.contextmanager
def quiet_lightning() -> Iterator[None]:
    """Silence PyTorch Lightning's (and DeepSpeed's) informational logging and their known harmless warnings while a
    model trains (the MLP classifier, the distilled controller); the levels are restored afterwards. Lightning is
    imported only when this runs."""
    from lightning.fabric.utilities.warnings import PossibleUserWarning

    loggers = [logging.getLogger(n) for n in ("lightning", "lightning.pytorch", "lightning.fabric", "DeepSpeed")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=PossibleUserWarning)
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            warnings.filterwarnings("ignore", message=".*module\\(s\\) in eval mode.*")
            warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
            warnings.filterwarnings("ignore", message=".*litlogger.*")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
