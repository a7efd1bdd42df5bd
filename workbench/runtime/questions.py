"""What the runtime accepts as a question: the one check behind ``Runtime.answer_many``, ``workbench infer --input``
and ``workbench serve`` (whose request models call :func:`is_blank` too, to answer 422 naming the field).

A question is a string with at least one visible character (:func:`is_blank`: whitespace, zero-width and other
format characters, lone combining marks and blank-drawing letters are not visible) and no lone surrogate (a
``"\\ud800"`` escape in JSON gives one: not Unicode text, and a tokenizer fails on it deep inside a method).
"""

from __future__ import annotations

import re
import unicodedata

# Characters that draw nothing although Unicode gives them a letter or symbol category (Hangul fillers, the blank
# Braille pattern): a question made of them is as blank as one of spaces.
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
# Categories that draw nothing on their own: controls and format characters (zero-width space / joiners, bidi marks,
# the BOM), unassigned and surrogate code points, separators, and combining marks (which only decorate a base letter).
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cn", "Cs", "Zs", "Zl", "Zp", "Mn", "Me"})
_SURROGATE = re.compile("[\ud800-\udfff]")


def is_blank(text: str) -> bool:
    """True when ``text`` has no visible character: only whitespace, zero-width / format characters, lone combining
    marks or known blank-drawing letters (so ``"\\u200b\\u200d"`` is blank, like ``"   "``)."""
    return not any(
        not ch.isspace() and ch not in _BLANK_LETTERS and unicodedata.category(ch) not in _INVISIBLE_CATEGORIES
        for ch in text
    )


def question_problem(question: object) -> str | None:
    """Why ``question`` cannot be asked — not a string, blank, or holding a lone surrogate — as words to follow its
    name in an error (``"'question' is blank ..."``); None when it can be."""
    if not isinstance(question, str):
        return f"is of type {type(question).__name__}: only question strings are accepted"
    if is_blank(question):
        return "is blank: a question needs at least one visible character (not only spaces or zero-width ones)"
    surrogate = _SURROGATE.search(question)
    if surrogate:
        return f"holds a lone surrogate (U+{ord(surrogate.group()):04X}): not valid text"
    return None
