"""Reading the records of a local ``.jsonl`` / ``.json`` / ``.parquet`` file (a dataset, a corpus, a raw hub-format
fixture): :func:`read_rows`, with one-line :class:`~workbench.core.errors.DataError` naming the file. No
``datasets`` import, so the runtime can read a corpus file with it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workbench.core.errors import DataError
from workbench.core.regular_files import check_regular
from workbench.data.field_mapping import USER_FILE_SUFFIXES

_JSON_LIST_KEYS = ("data", "rows", "examples")


def _read_jsonl(path: Path) -> Iterator[Any]:
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"line {line_number}: invalid JSON ({exc.msg})", str(path)) from exc
            except (ValueError, RecursionError) as exc:  # an integer of over 4,300 digits; nesting too deep
                raise DataError(f"line {line_number}: {_unreadable(exc)}", str(path)) from None


def _read_json(path: Path) -> list[Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"invalid JSON at line {exc.lineno} ({exc.msg})", str(path)) from exc
    except (ValueError, RecursionError) as exc:
        raise DataError(_unreadable(exc), str(path)) from None
    if isinstance(data, dict):
        for key in _JSON_LIST_KEYS:
            if isinstance(data.get(key), list):
                return data[key]
    if not isinstance(data, list):
        raise DataError(f"expected a JSON list of rows (or an object with one of {_JSON_LIST_KEYS})", str(path))
    return data


def _unreadable(exc: ValueError | RecursionError) -> str:
    """Why Python's JSON parser gave up on valid-looking JSON, without the value it read."""
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply to read"
    return "a JSON number Python cannot read (an integer of thousands of digits)"


def _read_parquet(path: Path) -> list[Any]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
        raise DataError(f"cannot read Parquet: {exc}".splitlines()[0], str(path)) from exc


def read_rows(path: str | Path) -> list[Any]:
    """All records of a ``.jsonl`` (one JSON value per non-blank line), ``.json`` (a list, or an object with a
    ``data`` / ``rows`` / ``examples`` list) or ``.parquet`` file, in order.

    Raises :class:`DataError` naming the file when it is missing, not a regular file (a FIFO would block the read),
    unreadable or not in that format.
    """
    path = Path(path)
    if path.suffix.lower() not in USER_FILE_SUFFIXES:
        raise DataError(f"unsupported file type {path.suffix!r}; use one of {', '.join(USER_FILE_SUFFIXES)}", str(path))
    check_regular(path, "data")
    try:
        if path.suffix.lower() == ".jsonl":
            return list(_read_jsonl(path))
        if path.suffix.lower() == ".json":
            return _read_json(path)
        return _read_parquet(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read file: {exc.__class__.__name__}: {exc}".splitlines()[0], str(path)) from exc
