"""Checks on request values that every route of both servers applies, with no dependency: Unicode text, and
integers that an error message may quote.

* **Lone surrogates** — JSON can spell ``"\\ud800"``, which is no Unicode character: a tokenizer refuses it with an
  exception (an HTTP 500 before this check). :func:`has_lone_surrogate` finds one so the field can be refused by
  name.
* **Huge integers** — JSON integers have no size limit (Python parses up to 4,300 digits): :func:`shown_int` quotes
  an integer in an error message only when it is short, so a refusal stays one short line.
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")
_SHOWN_DIGITS = 18


def has_lone_surrogate(text: str) -> bool:
    """True when ``text`` holds a UTF-16 surrogate code point (U+D800..U+DFFF): not Unicode text, and no tokenizer
    takes it."""
    return _SURROGATE.search(text) is not None


def shown_int(value: int) -> str:
    """``value`` as an error message quotes it: its digits when it has at most 18, else ``a number of more than 18
    digits`` (a request's 4,000-digit value is never echoed back)."""
    return str(value) if abs(value) < 10**_SHOWN_DIGITS else f"a number of more than {_SHOWN_DIGITS} digits"
