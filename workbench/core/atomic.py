"""Atomic writes: an output is either complete or absent, never half-written.

Files are written to a temporary sibling and renamed into place; directories are built in a temporary sibling
directory and swapped in with one rename.

When the machine refuses the write — a full disk (ENOSPC), a read-only file system (EROFS), no permission — the
temporary is removed and a one-line :class:`~workbench.core.errors.StorageError` names the target and the reason (an
:class:`OSError` too, with the cause's ``errno``). An error raised by the code that fills an :func:`atomic_directory`
becomes one only when it is such a refusal for a file inside the directory (named then by its place in the final
directory, the temporary being gone); any other passes through unchanged.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workbench.core.errors import STORAGE_ERRNOS, StorageError, storage_error


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file and an atomic rename; StorageError (one line naming
    ``path``, nothing left behind) when the machine refuses the write."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _refused(exc, path, "cannot write it") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _refused(exc, path, "cannot write it") from exc
        raise
    return path


def _refused(exc: OSError, path: Path, doing: str) -> OSError:
    """``exc`` as a one-line StorageError naming ``path`` (kept as it is when it already is one)."""
    return exc if isinstance(exc, StorageError) else storage_error(exc, str(path), doing, str(path))


def _refused_inside(exc: OSError, tmp: Path, path: Path) -> OSError | None:
    """A StorageError naming ``path`` for ``exc`` raised while filling ``tmp`` when ``exc`` is a refused write
    (:data:`~workbench.core.errors.STORAGE_ERRNOS`) of a file inside ``tmp`` (which is about to be removed, so its
    name would mislead); None for any other error."""
    if exc.errno not in STORAGE_ERRNOS or not isinstance(exc.filename, str | os.PathLike):
        return None
    name, top = Path(os.path.abspath(os.fsdecode(exc.filename))), Path(os.path.abspath(tmp))
    if not name.is_relative_to(top):
        return None
    inside = name.relative_to(top).as_posix()
    return storage_error(exc, str(path), f"cannot write {inside}" if inside != "." else "cannot write it", str(path))


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON to ``path`` atomically."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


@contextlib.contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary directory; on success it replaces ``path`` in one step, on error it is removed.

    An existing ``path`` is kept until the new content is complete, so an interrupted write loses nothing.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    except OSError as exc:
        raise _refused(exc, path, "cannot create it") from exc
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the finished output gets normal permissions
        yield tmp
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        refused = _refused_inside(exc, tmp, path) if isinstance(exc, OSError) else None
        if refused is not None:
            raise refused from exc
        raise
    _swap_in(tmp, path)


def _swap_in(tmp: Path, path: Path) -> None:
    """Replace ``path`` (if any) by the finished directory ``tmp``; on a refusal the old content is put back and
    ``tmp`` removed."""
    old = None
    try:
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
        os.replace(tmp, path)
    except OSError as exc:
        if old is not None and not path.exists():
            with contextlib.suppress(OSError):
                os.replace(old, path)
        shutil.rmtree(tmp, ignore_errors=True)
        raise _refused(exc, path, "cannot replace it") from exc
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
