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
        self.what = what
        self.where = where
        super().__init__(f"{where}: {what}" if where else what)


class ConfigError(WorkbenchError):
    """A recipe or override is malformed: unknown key, wrong type, missing value, bad YAML."""


class AssetError(WorkbenchError):
    """A model, tokenizer or data asset cannot be resolved or loaded."""


class DataError(WorkbenchError):
    """A dataset cannot be read or does not match the expected schema."""
