"""The workbench's user-facing errors.

Every problem caused by the user's input (a recipe, a key, a dataset, an asset, a bundle) is raised as a
:class:`WorkbenchError`: the CLI prints its one-line message and exits with status 2, with no traceback.
"""

from __future__ import annotations

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
