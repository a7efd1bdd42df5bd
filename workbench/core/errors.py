"""The workbench's user-facing errors.

Every problem caused by the user's input (a recipe, a key, a dataset, an asset, a bundle) is raised as a
:class:`WorkbenchError`: the CLI prints its one-line message and exits with status 2, with no traceback.
"""

from __future__ import annotations

import errno as _errno
import os

EXIT_USER_ERROR = 2


class WorkbenchError(Exception):
    """A problem with the user's input, reported as one line: ``<where>: <what>``.

    ``where`` names the place (a file and line, a config key, a dataset path); ``what`` says what is wrong and,
    when possible, how to fix it.
    """

    def __init__(self, what: str, where: str | None = None) -> None:
        self.what = one_line(what)
        self.where = one_line(where) if where is not None else None
        super().__init__(f"{self.where}: {self.what}" if self.where else self.what)


MAX_MESSAGE_CHARS = 1000
"""Longest ``what`` or ``where`` kept in an error (a message quoting a crafted 10 MB value stays readable)."""


def one_line(text: object) -> str:
    """``text`` as one printable line: line breaks and other control characters escaped (a key or value read from
    a file may hold them), cut to :data:`MAX_MESSAGE_CHARS` characters."""
    line = "".join(
        ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii") for ch in str(text)
    )
    return line if len(line) <= MAX_MESSAGE_CHARS else line[: MAX_MESSAGE_CHARS - 1] + "…"


class ConfigError(WorkbenchError):
    """A recipe or override is malformed: unknown key, wrong type, missing value, bad YAML."""


class AssetError(WorkbenchError):
    """A model, tokenizer or data asset cannot be resolved or loaded."""


class DataError(WorkbenchError):
    """A dataset cannot be read or does not match the expected schema."""


class StorageError(WorkbenchError, OSError):
    """The machine refused to store or read a file — the disk is full, the file system is read-only, permission is
    denied, the path is not a regular file — rather than its content being wrong. Also an :class:`OSError`
    (``errno`` keeps the cause, None when there was no system error; ``filename`` the file refused, when one was),
    so code that handles OSError still does."""

    def __init__(self, what: str, where: str | None = None, errno: int | None = None, filename: str | None = None):
        super().__init__(what, where)
        self.errno = errno
        self.filename = filename

    def __str__(self) -> str:  # OSError's own would print "[Errno N] ..." once errno is set
        return f"{self.where}: {self.what}" if self.where else self.what


STORAGE_ERRNOS = frozenset(
    {_errno.ENOSPC, _errno.EDQUOT, _errno.EFBIG, _errno.EROFS, _errno.EACCES, _errno.EPERM, _errno.ENOTDIR}
)
"""System errors that say the machine refused a write or a path (full, over quota, file too large, read-only, not
permitted, a file where a directory was expected), not that the workbench failed: the CLI reports them in one line."""


def os_error_words(exc: OSError) -> str:
    """The system's reason for ``exc`` as words for an error line, e.g. ``"no space left on device (ENOSPC)"``; never
    the file name it carries (the caller names the place)."""
    code = exc.errno
    if not isinstance(code, int):
        return type(exc).__name__
    text = os.strerror(code)
    return f"{text[:1].lower()}{text[1:]} ({_errno.errorcode.get(code, code)})"


def storage_error(exc: OSError, where: str | None, doing: str, filename: str | None = None) -> StorageError:
    """A :class:`StorageError` for ``exc``, raised while ``doing`` something (``"cannot write it"``) at ``where``;
    ``filename``: the file refused (default: the one ``exc`` names)."""
    return StorageError(f"{doing}: {os_error_words(exc)}", where, exc.errno, filename or exc.filename)
