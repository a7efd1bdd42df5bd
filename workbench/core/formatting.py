"""Numbers and Markdown tables for every report, model card and CLI listing (one rule for missing values).

Reports used to carry their own ``_fmt`` helpers, which printed a missing value as ``–``, ``n/a`` or ``None`` and a
NaN as ``nan``. Here a value that is missing (None) or not a finite number prints as :data:`MISSING` everywhere.
Layer 1: no ML import.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

MISSING = "–"
"""How a missing or non-finite value prints."""


def fmt(value: Any, digits: int = 3, *, style: str = "f", suffix: str = "") -> str:
    """``value`` as report text: None, NaN and ±inf → :data:`MISSING`; a float (or numpy float) → ``digits`` digits
    in ``style`` (``"f"`` fixed, ``"g"`` significant, ``"%"`` percent, ``"e"`` exponent) plus ``suffix``; an int or a
    bool → ``str``; anything else → ``str``."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        number = float(value)
        return f"{number:.{digits}{style}}{suffix}" if math.isfinite(number) else MISSING
    return str(value)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> list[str]:
    """A Markdown table as lines: the header, the rule, one line per row (cells already text, or formatted with
    :func:`fmt`). ``align`` has one letter per column, ``l`` or ``r`` (default: the first column left, the rest
    right). ValueError when a row or ``align`` does not have one entry per column."""
    width = len(header)
    align = align or "l" + "r" * (width - 1)
    if len(align) != width or set(align) - {"l", "r"}:
        raise ValueError(f"align needs one of 'l' / 'r' per column ({width}), got {align!r}")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    for row in rows:
        if len(row) != width:
            raise ValueError(f"a row has {len(row)} cells for {width} columns: {list(row)!r}")
        lines.append("| " + " | ".join(c if isinstance(c, str) else fmt(c) for c in row) + " |")
    return lines


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, in the plural unless ``n`` is 1: ``1 question``, ``32 questions`` (a regular noun)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
