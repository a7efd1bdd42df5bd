"""Files a user names for a command to read or append to: regular files only, and one writer at a time.

A FIFO blocks its reader until a writer comes (forever, for a command nobody feeds), ``/dev/zero`` never ends,
``/dev/full`` fails every write: none is a file of questions or answers. :func:`open_regular` refuses any path that is
not a regular file (symbolic links followed) — checked before opening, so a FIFO is never opened to wait on, and again
on the opened descriptor, so a path swapped in between is caught too — in one line saying what it is instead.
:func:`lock_exclusive` holds an advisory ``flock`` on an opened file while it stays open, so that a second process
appending to the same file is refused in one line instead of interleaving its rows (POSIX systems).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from workbench.core.errors import DataError, storage_error

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str:
    """What a ``st_mode`` says the file is, in words: ``"a regular file"``, ``"a FIFO (named pipe)"``, ..."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def _not_regular(mode: int, where: str) -> DataError:
    return DataError(f"is {file_kind(mode)}, not a regular file", where)


def check_regular(path: Path, role: str, *, missing_ok: bool = False) -> bool:
    """Whether ``path`` exists, after checking that it is a regular file if it does (symbolic links followed).

    DataError naming ``path`` when it is missing (unless ``missing_ok``) or exists as anything but a regular file;
    StorageError when the machine will not say (no permission on a directory above it, say)."""
    where = str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if missing_ok:
            return False
        raise DataError(f"no such {role} file", where) from None
    except OSError as exc:
        raise storage_error(exc, where, f"cannot read the {role}") from None
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(info.st_mode, where)
    return True


def open_regular(path: Path, role: str, *, append: bool = False) -> BinaryIO:
    """``path`` opened in binary once it is known to be a regular file: for reading, or with ``append`` for reading
    and appending (created when absent). ``role`` names it in errors (``"input"``, ``"output"``).

    Errors as :func:`check_regular`'s, plus a StorageError when the machine refuses to open it (no permission, a
    read-only file system)."""
    check_regular(path, role, missing_ok=append)
    flags = (os.O_RDWR | os.O_CREAT | os.O_APPEND) if append else os.O_RDONLY
    try:
        # O_NONBLOCK: should a FIFO have been swapped in since the check, opening it does not wait for a writer
        fd = os.open(path, flags | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as exc:
        raise storage_error(exc, str(path), f"cannot open the {role}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _not_regular(info.st_mode, str(path))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "r+b" if append else "rb")


def lock_exclusive(handle: BinaryIO, where: str, busy: str) -> None:
    """Hold an exclusive advisory lock on the open file ``handle`` until it is closed, without waiting: DataError
    ``busy`` naming ``where`` when another open file (another process) holds one."""
    import fcntl  # POSIX only; imported here so the module imports anywhere

    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise DataError(busy, where) from None
    except OSError as exc:  # a file system without locks
        raise storage_error(exc, where, "cannot lock it") from None
