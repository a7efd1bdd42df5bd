"""Reading the prompted controller's replies: preambles stripped, the first JSON value, a yes / no or numeric
verdict, the intent letter, a keyword list. Every reader returns None (or the input cleaned) instead of raising."""

from __future__ import annotations

import json
import re
from typing import Any

from workbench.methods.controller.prompts import INTENT_LETTERS, INTENTS

__all__ = ["clean_reply", "json_value", "keyword_list", "parse_intent", "parse_verdict"]

_PREAMBLE = re.compile(
    r"^\s*(?:(?:sure|okay|ok)[,!.]?\s*)?(?:here(?:'s| is)[^:\n]*:|(?:rewritten |repaired )?passage\s*:|"
    r"(?:search )?query\s*:)\s*",
    re.IGNORECASE,
)


def clean_reply(text: str) -> str:
    """``text`` without a leading preamble (``Sure, here is …:``, ``Passage:``, ``Query:``) and without one pair of
    matching surrounding quotes or backticks, stripped."""
    text = _PREAMBLE.sub("", text.strip()).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    return text


def json_value(text: str, opener: str) -> Any:
    """The first JSON value starting with ``opener`` (``{`` or ``[``) found in ``text``; None if there is none."""
    decoder = json.JSONDecoder()
    for match in re.finditer(re.escape(opener), text):
        try:
            value, _ = decoder.raw_decode(text[match.start() :])
        except ValueError:
            continue
        return value
    return None


def parse_verdict(text: str) -> float | None:
    """A generated yes / no verdict as the prompted controller reads it, as a score in [0, 1].

    A reply whose first word (after leading punctuation, any case) is yes / true gives 1.0, no / false 0.0;
    otherwise its first number (``0.7``, or a percentage: ``70%`` → 0.7) when that lies in [0, 1]. None otherwise
    (no verdict word, no number, or a first number outside [0, 1]): the caller falls back. Never raises.
    """
    lowered = text.strip().lower()
    match = re.match(r"^\W*(yes|no|true|false)\b", lowered)
    if match:
        return 1.0 if match.group(1) in ("yes", "true") else 0.0
    number = re.search(r"(?<![\w.])(\d+(?:\.\d+)?|\.\d+)\s*(%?)", lowered)
    if number:
        value = float(number.group(1)) / (100.0 if number.group(2) else 1.0)
        if 0.0 <= value <= 1.0:
            return value
    return None


def parse_intent(text: str) -> str | None:
    """The intent named by a reply: a bare letter A / B / C, or an intent word; None otherwise."""
    stripped = text.strip()
    match = re.match(r"^\W*([ABCabc])(?:\W|$)", stripped)
    if match:
        return INTENTS[INTENT_LETTERS.index(match.group(1).upper())]
    lowered = stripped.lower()
    for intent, pattern in (("entity", r"entity|lookup|named"), ("explanatory", r"explan"), ("multihop", r"several")):
        if re.search(pattern, lowered):
            return intent
    return None


def keyword_list(value: Any) -> list[str] | None:
    """A keyword list from a reply's value: a list of strings or numbers, or a string split at ``,`` ``;`` and line
    breaks; items stripped of white space and quotes, empty ones and repeats dropped. None when nothing usable."""
    if isinstance(value, str):
        value = re.split(r"[,;\n]", value)
    if not isinstance(value, list) or not all(isinstance(v, str | int | float) for v in value):
        return None
    out = [str(v).strip().strip("\"'") for v in value]
    return list(dict.fromkeys(v for v in out if v)) or None
