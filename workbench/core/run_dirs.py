"""Run and report directories: which directories a run may write into, and the marker that claims one.

A run writes only its own names at the top of its run directory (:data:`OWN_NAMES`), replaces only its stages'
output directories, ``stages/<stage>/``, and deletes only the temporaries a killed run left
(:func:`remove_stale_temporaries`); it never overwrites or deletes anything else there. So that it never takes a
user's directory for its own, a run directory is used only when it

* does not exist, or is empty (the run creates it and writes the marker, before anything else);
* holds the marker :data:`RUN_MARKER` (``.workbench-run``, JSON: format, version, recipe, created);
* or was made by a workbench from before the marker: ``config.yaml`` starts with ``# resolved from`` and either
  ``manifest.json`` has ``stages`` or ``logs/run.log`` exists (the marker is added on its next run).

Any other non-empty directory is refused with one line, unless the user adopts it (``--adopt-run-dir``, a flag of
every verb that runs a recipe: ``workbench run``, ``evaluate``, ``study``) — and even then only when it holds none of
the names a run writes, so adopting overwrites nothing.
The filesystem root, the home directory (and any directory above it) and a git checkout's root are refused always.

A report stage replaces its report directory (``report.dir``) as a whole, so that directory must be new, empty, or
hold only what a report stage writes (``report.md`` and ``.png`` plots); it may not hold the run directory or lie
inside the run's own files.
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
from pathlib import Path
from typing import Any

from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError, storage_error

RUN_MARKER = ".workbench-run"
"""The file that makes a directory a run directory (written before anything else)."""
MARKER_FORMAT = "workbench-run"
MARKER_VERSION = 1
OWN_NAMES = frozenset(
    {RUN_MARKER, ".lock", "config.yaml", "manifest.json", "logs", "stages", "scratch", "studies", "wandb"}
)
"""What a run writes at the top of its run directory: the marker, the lock, the resolved config, the manifest, the
log, the stages' outputs, their scratch space, the default study storage and the offline wandb files."""
LEGACY_HEADER = "# resolved from "
"""The first line of the ``config.yaml`` every run has written (recognises run directories made before the marker)."""
MAX_MANIFEST_BYTES = 64 * 1024 * 1024

_RANDOM = r"[a-z0-9_]{8}"  # tempfile's random part of mkdtemp / mkstemp names
_STALE_FILE = re.compile(
    rf"^\.(?:{'|'.join(re.escape(n) for n in ('config.yaml', 'manifest.json', RUN_MARKER))})\.{_RANDOM}\.tmp$"
)
"""A temporary file :func:`workbench.core.atomic.atomic_write_bytes` leaves in the run directory when killed."""
_STALE_STAGE = re.compile(rf"^\.(?P<stage>[A-Za-z0-9_]+)\.(?:{_RANDOM}\.tmp|old-[0-9]+)$")
"""A temporary or replaced stage directory :func:`workbench.core.atomic.atomic_directory` leaves under ``stages/``
when killed (``.study.k2j9x0ab.tmp``, ``.study.old-4242``)."""


def protected_reason(path: Path) -> str | None:
    """Why ``path`` may never be a run or report directory — it is the filesystem root, the home directory or a
    directory above it, or a git checkout's root (symbolic links followed) — or None."""
    real = path.resolve()
    if real == real.parent:
        return "the filesystem root"
    try:
        home = Path.home().resolve()
    except (RuntimeError, KeyError):  # no home directory known
        home = None
    if real == home:
        return "the home directory"
    if home is not None and home.is_relative_to(real):
        return f"a directory above the home directory {home}"
    if (real / ".git").exists():  # a directory in a checkout, a file in a worktree or submodule
        return "the root of a git checkout"
    return None


def read_run_marker(run_dir: Path) -> dict[str, Any] | None:
    """The run marker of ``run_dir`` when it holds a valid one, else None."""
    try:
        marker = json.loads((run_dir / RUN_MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return marker if isinstance(marker, dict) and marker.get("format") == MARKER_FORMAT else None


def _made_before_the_marker(run_dir: Path) -> bool:
    """Whether ``run_dir`` has the layout a run wrote before runs wrote the marker (see the module docstring)."""
    try:
        with (run_dir / "config.yaml").open(encoding="utf-8", errors="replace") as handle:
            first = handle.readline(len(LEGACY_HEADER))
    except OSError:
        return False
    if first != LEGACY_HEADER:
        return False
    return (run_dir / "logs" / "run.log").is_file() or _manifest_has_stages(run_dir / "manifest.json")


def _manifest_has_stages(path: Path) -> bool:
    try:
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            return False
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(manifest, dict) and "stages" in manifest


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` is a directory a workbench run made: it holds the marker or the layout of an earlier run."""
    return path.is_dir() and (read_run_marker(path) is not None or _made_before_the_marker(path))


def _entries(path: Path, where: str) -> list[str]:
    try:
        return sorted(entry.name for entry in path.iterdir())
    except OSError as exc:
        raise ConfigError(f"cannot list it ({exc.__class__.__name__})", where) from None


def _some(names: list[str], most: int = 3) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def check_run_dir(path: Path, *, adopt: bool = False, adopt_hint: str = "--adopt-run-dir") -> None:
    """Refuse ``path`` as a run directory unless a run may write there (see the module docstring); writes nothing.

    Raises a one-line :class:`ConfigError` for the filesystem root, the home directory, a git checkout's root, a
    file, and a non-empty directory no run made — unless ``adopt``, when it holds none of :data:`OWN_NAMES`.
    ``adopt_hint`` is the command the refusal suggests to adopt it.
    """
    where = f"run_dir {path}"
    reason = protected_reason(path)
    if reason is not None:
        raise ConfigError(f"is {reason}: a run directory must be a directory of its own (a new or empty one)", where)
    if not path.exists():
        return
    if not path.is_dir():
        raise ConfigError("exists and is not a directory", where)
    names = _entries(path, where)
    if not names or is_run_dir(path):
        return
    if not adopt:
        raise ConfigError(
            f"is not empty and no workbench run made it (it holds {_some(names)}): pick a new or empty run_dir, or "
            f"adopt this one: {adopt_hint}",
            where,
        )
    clash = [name for name in names if name in OWN_NAMES]
    if clash:
        raise ConfigError(
            f"cannot be adopted: it holds {_some(clash, 8)}, which a run would overwrite; move them away or pick "
            "another run_dir",
            where,
        )


def claim_run_dir(path: Path, recipe: str) -> None:
    """Create ``path`` if needed and write its run marker unless it holds one (call :func:`check_run_dir` first).

    A one-line :class:`~workbench.core.errors.StorageError` naming the run directory when the machine refuses
    either (a read-only file system, a full disk, no permission); nothing is left half-written."""
    where = f"run_dir {path}"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise storage_error(exc, where, "cannot create it") from exc
    if read_run_marker(path) is None:
        created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        marker = {"format": MARKER_FORMAT, "version": MARKER_VERSION, "recipe": recipe, "created": created}
        try:
            atomic_write_json(path / RUN_MARKER, marker)
        except OSError as exc:
            raise storage_error(exc, where, f"cannot write its run marker {RUN_MARKER}") from exc


def remove_stale_temporaries(run_dir: Path, stages: set[str] | frozenset[str]) -> list[Path]:
    """Delete what a killed run left behind and return it: ``.config.yaml.*.tmp``-style files at the top of
    ``run_dir`` and, under ``stages/``, ``.<stage>.<8 chars>.tmp`` / ``.<stage>.old-<pid>`` directories of the
    stages named in ``stages``. Only names of exactly those patterns are touched, never a symbolic link; call it
    while holding the run's lock (no other writer is then at work)."""
    removed: list[Path] = []
    for entry in _listing(run_dir):
        if _STALE_FILE.match(entry.name) and entry.is_file() and not entry.is_symlink():
            entry.unlink(missing_ok=True)
            removed.append(entry)
    for entry in _listing(run_dir / "stages"):
        match = _STALE_STAGE.match(entry.name)
        if match and match["stage"] in stages and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _listing(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except OSError:  # absent, or not a directory: nothing was left there
        return []


def _holds_only_a_report(path: Path, names: list[str]) -> bool:
    """Whether ``path`` holds what a report stage writes and nothing else: ``report.md`` and ``.png`` files."""
    if "report.md" not in names:
        return False
    for name in names:
        entry = path / name
        if entry.is_symlink() or not entry.is_file() or not (name == "report.md" or name.endswith(".png")):
            return False
    return True


def check_report_dir(report_dir: Path, run_dir: Path) -> None:
    """Refuse ``report_dir`` as the directory report stages replace as a whole unless it is new, empty or holds only
    a report (see the module docstring); also when it is protected, holds the run directory or lies inside the run's
    own files. Writes nothing; raises a one-line :class:`ConfigError`."""
    where = f"report.dir {report_dir}"
    reason = protected_reason(report_dir)
    if reason is not None:
        raise ConfigError(f"is {reason}: a report stage replaces its report directory as a whole", where)
    real, run = report_dir.resolve(), run_dir.resolve()
    if run.is_relative_to(real):
        raise ConfigError(f"holds the run directory {run_dir}: a report stage replaces its directory as a whole", where)
    if real.is_relative_to(run) and real.relative_to(run).parts[0] in OWN_NAMES:
        raise ConfigError("lies inside the run's own files: put it elsewhere (e.g. <run_dir>/report)", where)
    if not report_dir.exists():
        return
    if not report_dir.is_dir():
        raise ConfigError("exists and is not a directory", where)
    names = _entries(report_dir, where)
    if names and not _holds_only_a_report(report_dir, names):
        raise ConfigError(
            f"holds files no report stage wrote ({_some(names)}) and a report stage replaces its directory as a "
            "whole: pick a new or empty report.dir",
            where,
        )
