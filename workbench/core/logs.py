"""Logging and progress: one console (rich), an optional log file, a global quiet switch; progress as a bar on a
terminal and as rate-limited log lines anywhere else (a log file, a pipe)."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from rich import get_console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

T = TypeVar("T")

_STATE = {"quiet": False}
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def set_quiet(quiet: bool) -> None:
    """Globally hide progress bars and info-level console output (warnings and errors still show)."""
    _STATE["quiet"] = quiet


def is_quiet() -> bool:
    """Whether ``--quiet`` is in force."""
    return _STATE["quiet"]


FILE_ONLY = {"file_only": True}
"""``extra=`` for a record the log file keeps and the console leaves out (the console shows it otherwise: the run's
findings, which the CLI prints itself after its stage table)."""


def _not_file_only(record: logging.LogRecord) -> bool:
    return not getattr(record, "file_only", False)


class _StdoutHandler(logging.StreamHandler):
    """Plain log lines on whatever ``sys.stdout`` is when a record is written (a handler that kept the stream it was
    made with would write to a replaced or closed one: a test's capture, a CLI runner's)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stdout

    @stream.setter
    def stream(self, value: Any) -> None:  # StreamHandler sets it; stdout is read at each write instead
        pass


def setup_logging(level: str = "info", log_file: str | Path | None = None) -> None:
    """Configure the ``workbench`` logger: a console handler (rich on a terminal, plain lines on stdout elsewhere)
    and, when given, a plain-text file handler.

    Console level is ``level`` (raised to warning under quiet); the file always records ``level`` and above. A record
    logged with ``extra=FILE_ONLY`` goes to the file alone. Calling it again replaces the previous handlers (a new
    run gets a new log file).
    """

    numeric = LEVELS[level]
    logger = logging.getLogger("workbench")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    logger.setLevel(numeric)
    logger.propagate = False
    console: logging.Handler
    if is_terminal():
        console = RichHandler(show_path=False, rich_tracebacks=False, markup=False)
    else:  # a log file or a pipe: one plain line per record (rich would fold it at 80 columns and pad it)
        console = _StdoutHandler()
        console.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    console.setLevel(max(numeric, logging.WARNING) if is_quiet() else numeric)
    console.addFilter(_not_file_only)
    logger.addHandler(console)
    if log_file is not None:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(log_file, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.setLevel(numeric)
        logger.addHandler(handler)


def is_terminal() -> bool:
    """Whether the console (rich's, on stdout) is an interactive terminal: progress bars draw there; elsewhere (a log
    file, a pipe, CI) progress is written as :class:`ProgressLines`."""

    return get_console().is_terminal


def duration_text(seconds: float) -> str:
    """``seconds`` as a clock reading: ``0:42``, ``12:05``, ``1:02:03``."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _emit_line(line: str) -> None:
    """Write a progress line to the ``workbench`` log (console and run log) or, where no logging is set up (a verb
    that configures none, such as ``infer``), to stderr unless ``--quiet``."""
    logger = logging.getLogger("workbench.progress")
    if logger.hasHandlers():
        logger.info(line)
    elif not is_quiet():
        print(line, file=sys.stderr, flush=True)


class ProgressLines:
    """Progress as plain lines for output that is not a terminal (a log file, a pipe), rate-limited so a log stays
    readable: ``collect (test): 120 of 500 (24%), 3.1/s, elapsed 0:38, ETA 2:02``.

    A line is due when at least ``min_interval`` seconds have passed since the previous one *and* either another
    tenth of ``total`` is done or ``max_interval`` seconds have passed (so a slow stage still shows a line a minute,
    a fast one at most ten); :meth:`close` writes the last line (``500 of 500 (100%) in 7:02, 1.2/s``). The rate
    counts only the items done since this progress started (a resumed study's earlier trials are not in it).
    ``emit`` receives each line (default: the ``workbench`` log, or stderr where no logging is set up); ``clock`` is
    the time source (seconds)."""

    def __init__(
        self,
        description: str,
        total: int | None,
        *,
        completed: int = 0,
        emit: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        min_interval: float = 10.0,
        max_interval: float = 60.0,
    ) -> None:
        self.description, self.total, self.completed = description, total, completed
        self.note: str | None = None
        self._emit, self._clock = emit if emit is not None else _emit_line, clock
        self._min, self._max = min_interval, max_interval
        self._started = self._last = clock()
        self._start_count = self._last_count = completed

    def _tenth(self, count: int) -> int:
        return 10 * count // self.total if self.total else 0

    def update(self, completed: int, note: str | None = None) -> None:
        """Set the number done to ``completed`` (and the ``note`` shown after it, e.g. a loss); write a line when
        one is due."""
        self.completed, self.note = completed, note if note is not None else self.note
        now = self._clock()
        since = now - self._last
        if since < self._min or completed == self._last_count or (self.total and completed >= self.total):
            return  # too soon, nothing new, or done (the last line says it)
        if self._tenth(completed) > self._tenth(self._last_count) or since >= self._max:
            self._emit(self.line(now))
            self._last, self._last_count = now, completed

    def advance(self, n: int = 1, note: str | None = None) -> None:
        """Count ``n`` more done (see :meth:`update`)."""
        self.update(self.completed + n, note)

    def line(self, now: float, *, final: bool = False) -> str:
        """The progress line at time ``now``: n of N, share done, rate, elapsed and ETA (the last line: the total
        time and the rate)."""
        elapsed = now - self._started
        done = self.completed - self._start_count
        rate = done / elapsed if elapsed > 0 else 0.0
        count = (
            f"{self.completed} of {self.total} ({100 * self.completed // self.total}%)"
            if self.total
            else (f"{self.completed}")
        )
        speed = "" if rate <= 0 else (f"{rate:.1f}/s" if rate >= 1 else f"{1 / rate:.1f} s each")
        note = f", {self.note}" if self.note else ""
        if final:
            return f"{self.description}: {count} in {duration_text(elapsed)}" + (f", {speed}" if speed else "") + note
        parts = [f"{self.description}: {count}", speed, f"elapsed {duration_text(elapsed)}"]
        if self.total and rate > 0:
            parts.append(f"ETA {duration_text((self.total - self.completed) / rate)}")
        return ", ".join(p for p in parts if p) + note

    def close(self) -> None:
        """Write the last line (n of N, total time, rate)."""
        self._emit(self.line(self._clock(), final=True))


class _Bar:
    """A rich progress bar with the same ``update`` / ``advance`` as :class:`ProgressLines` (a terminal's)."""

    def __init__(self, progress: Any, task: Any) -> None:
        self._progress, self._task = progress, task

    def update(self, completed: int, note: str | None = None) -> None:
        self._progress.update(self._task, completed=completed, **({"note": note} if note is not None else {}))

    def advance(self, n: int = 1, note: str | None = None) -> None:
        self._progress.update(self._task, advance=n, **({"note": note} if note is not None else {}))


class _Hidden:
    """The handle of a progress nobody sees (``shown=False``): same calls, no output."""

    def update(self, completed: int, note: str | None = None) -> None:
        pass

    def advance(self, n: int = 1, note: str | None = None) -> None:
        pass


@contextlib.contextmanager
def progress(
    description: str, total: int | None, *, completed: int = 0, shown: bool = True
) -> Iterator[ProgressLines | _Bar | _Hidden]:
    """Show the progress of ``total`` steps (``completed`` of them done already) while the block runs; the block
    reports through the yielded handle's ``advance(n=1, note=None)`` / ``update(completed, note=None)``. With
    ``shown`` False the handle does nothing (a caller's own switch).

    On a terminal (:func:`is_terminal`) and without ``--quiet``: a rich progress bar (n of N, elapsed, remaining).
    Otherwise: :class:`ProgressLines` to the log (a line per tenth or per minute, at most one per 10 s, and a last
    line when the block ends without an error), so a run whose output goes to a file is not silent."""
    if not shown:
        yield _Hidden()
        return
    if is_terminal() and not is_quiet():
        columns = (
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[note]}"),
        )
        with Progress(*columns, transient=False) as bar:
            yield _Bar(bar, bar.add_task(description, total=total, completed=completed, note=""))
        return
    lines = ProgressLines(description, total, completed=completed)
    yield lines
    lines.close()


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate ``items`` while showing :func:`progress` (a bar on a terminal, rate-limited lines in a log)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with progress(description, total) as shown:
        for item in items:
            yield item
            shown.advance()


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
