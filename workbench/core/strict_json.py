"""Strict JSON for files the workbench did not necessarily write itself: bundles, learned artifacts, manifests.

Python's :func:`json.loads` accepts three things a file written by the workbench never holds, and each has been
used to make a bundle load something its writer did not mean:

* **duplicate keys** — the last one silently wins, so a second ``"decision"`` block could replace the first while a
  reader that keeps the first (or a person reading the file) sees another;
* **NaN / Infinity** — not JSON at all; a ``"seed": NaN`` only failed at the first answer, deep in a method (a
  number too large for a float, ``1e400``, reads as infinity too);
* **huge integers** — an integer of more than 4,300 digits raises a :class:`ValueError` with a traceback (Python's
  own limit on converting digits), and one just under it costs quadratic time for nothing a workbench file holds;
* **unbounded nesting** — a 100k-deep array raises :class:`RecursionError`, a traceback instead of an error line
  (and a few hundred levels pass the parser, then break whatever walks the value recursively).

:func:`loads_strict` refuses each one as a one-line :class:`~workbench.core.errors.DataError` naming the file, and
:func:`read_json_strict` adds a size cap checked before a byte is parsed.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from workbench.core.errors import DataError

MAX_JSON_DEPTH = 64
"""Deepest nesting of objects and arrays accepted; the workbench's own files stay under 10 levels."""
MAX_INT_DIGITS = 40
"""Most digits of an integer accepted (its sign aside); the workbench's own integers (sizes, seeds, counts) have at
most 20, as a 64-bit integer does."""


class _Refused(ValueError):
    """Raised inside the decoder hooks; turned into a DataError by :func:`loads_strict`."""


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"duplicate key {key!r}")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of more than {MAX_INT_DIGITS} digits")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # the literal is finite, its value is not: 1e400
        raise _Refused("a number too large for a float")
    return value


def _depth(value: Any) -> int:
    """Deepest nesting of dicts and lists in a parsed value (iterative: costs one step per container)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def loads_strict(data: str | bytes, where: str, *, max_depth: int = MAX_JSON_DEPTH, allow_nan: bool = False) -> Any:
    """Parse JSON ``data`` refusing duplicate keys, NaN / Infinity (and numbers too large for a float), integers of
    more than :data:`MAX_INT_DIGITS` digits and nesting deeper than ``max_depth``. ``allow_nan`` accepts NaN and
    ±Infinity (what :func:`json.dumps` writes for them by default: a file the workbench wrote itself may hold them).

    DataError (one line, ``where`` naming the file) on invalid UTF-8, invalid JSON or any of the above."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"not UTF-8 text (byte {exc.start})", where) from None
    try:
        value = json.loads(
            data,
            object_pairs_hook=_unique_object,
            parse_constant=float if allow_nan else _no_constant,
            parse_int=_bounded_int,
            parse_float=float if allow_nan else _finite_float,
        )
    except _Refused as exc:
        raise DataError(f"not accepted as JSON: {exc}", where) from None
    except json.JSONDecodeError as exc:
        raise DataError(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})", where) from None
    except RecursionError:  # the C decoder recurses once per level: thousands of levels end here, not in a traceback
        raise DataError(f"JSON nested deeper than {max_depth} levels", where) from None
    if _depth(value) > max_depth:
        raise DataError(f"JSON nested deeper than {max_depth} levels", where)
    return value


def read_json_strict(path: str | Path, *, max_bytes: int, where: str | None = None) -> Any:
    """:func:`loads_strict` of the regular file ``path`` after checking its size is at most ``max_bytes``.

    DataError naming the file when it is missing, not a regular file, too large, unreadable or not strict JSON."""
    path = Path(path)
    where = where or str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise DataError("file not found", where) from None
    except OSError as exc:
        raise DataError(f"cannot read the file ({type(exc).__name__})", where) from None
    if not os.path.isfile(path):
        raise DataError("not a regular file", where)
    if info.st_size > max_bytes:
        raise DataError(f"file is {info.st_size} bytes (limit {max_bytes})", where)
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise DataError(f"cannot read the file ({type(exc).__name__})", where) from None
    if len(data) > max_bytes:  # grew since the stat
        raise DataError(f"file is over the limit of {max_bytes} bytes", where)
    return loads_strict(data, where)
