"""Check every answer an OpenAI-compatible server gives before a number of it is used (docs/served-models.md).

A server is a peer, not part of this program: after the start-up probe it may still answer with ``logprobs: null``,
NaN, a positive log-prob, a token list shorter than its log-prob list, too few choices, or another model's answer.
Each of these would become a NaN, −inf or impossible feature value. The readers here turn an answer into plain
Python values and raise :class:`InvalidAnswer` (one line, naming what is wrong and where, never quoting the
server's values) on the first thing that breaks the protocol; :class:`~workbench.backends.served_client
.ServedClient` retries such an answer, then fails the request with the reason.

What is checked: the answer is a JSON object with a ``choices`` list of exactly the count asked, indices
``0 .. count-1`` once each; each choice's text is a string; where log-probs were asked, the block is there and holds
one token, one log-prob and one top-k entry per token (chat: one item per token); every log-prob is a finite number
≤ 0 (:data:`POSITIVE_SLACK` allows float rounding); every top-k entry is a non-empty mapping of such numbers.
The only ``null`` accepted is the first echoed prompt token's (nothing predicts it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

POSITIVE_SLACK = 1e-6
"""Largest positive log-prob accepted (float rounding of a probability of 1); it is read as 0."""


class InvalidAnswer(ValueError):
    """A server's answer that breaks the protocol; the message says what and where, in one line."""


@dataclass
class LogprobBlock:
    """One choice's tokens, their raw log-probs and top-k mappings, aligned (``values[i]`` is ``tokens[i]``'s).
    With echo, position 0 is the first prompt token: its value is NaN and its top-k None."""

    tokens: list[str]
    values: list[float]
    tops: list[dict[str, float] | None]


def logprob(value: Any, where: str) -> float:
    """A log-prob from an answer: a finite number ≤ :data:`POSITIVE_SLACK` (a tiny positive one reads as 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidAnswer(f"{where} is not a number")
    number = float(value)
    if not math.isfinite(number):
        raise InvalidAnswer(f"{where} is not finite")
    if number > POSITIVE_SLACK:
        raise InvalidAnswer(f"{where} is a positive log-prob")
    return min(number, 0.0)


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidAnswer(f"{where} is not an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidAnswer(f"{where} is not a list")
    return value


def joined_completions(answer: Any) -> Any:
    """``answer`` as one completion object: a JSON array of completion objects — how llama.cpp's ``llama-server``
    answers a list of prompts, one object per prompt, each holding that prompt's choice(s) with their ``index`` in
    the whole list — becomes one object with every choice (in order), the first object's other fields and the
    ``usage`` counts summed; an object is returned as it is. The choices' indices are checked by :func:`choices`."""
    if not isinstance(answer, list):
        return answer
    if not answer:
        raise InvalidAnswer("the answer is an empty list")
    parts = [_mapping(part, f"answer {i}") for i, part in enumerate(answer)]
    models = {part.get("model") for part in parts}
    if len(models) > 1:
        raise InvalidAnswer("the answer's completions name different models")
    joined = {
        **parts[0],
        "choices": [c for i, part in enumerate(parts) for c in _list(part.get("choices"), f"answer {i}: 'choices'")],
    }
    usages = [part.get("usage") for part in parts]
    if all(isinstance(u, dict) for u in usages):
        joined["usage"] = {
            key: sum(u.get(key) or 0 for u in usages)
            for key in ("prompt_tokens", "completion_tokens", "total_tokens")
            if all(isinstance(u.get(key) or 0, int) and not isinstance(u.get(key), bool) for u in usages)
        }
    return joined


def choices(answer: Any, count: int) -> list[dict[str, Any]]:
    """The ``count`` choices of an answer, ordered by ``index`` (each index ``0 .. count-1`` exactly once)."""
    items = _list(_mapping(answer, "the answer").get("choices"), "'choices'")
    if len(items) != count:
        raise InvalidAnswer(f"asked for {count} choice(s), the answer holds {len(items)}")
    by_index: dict[int, dict[str, Any]] = {}
    for position, item in enumerate(items):
        choice = _mapping(item, f"choice {position}")
        index = choice.get("index", position)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count or index in by_index:
            raise InvalidAnswer(f"choice {position} has a missing, repeated or out-of-range index")
        by_index[index] = choice
    return [by_index[i] for i in range(count)]


def _text(value: Any, where: str) -> str:
    """A string field of an answer (null reads as empty)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidAnswer(f"{where} is not a string")
    return value


def completion_text(choice: dict[str, Any], where: str) -> str:
    """A completion choice's ``text`` (a string; null reads as empty)."""
    return _text(choice.get("text"), f"{where}: 'text'")


def chat_text(choice: dict[str, Any], where: str) -> str:
    """A chat choice's ``message.content`` (a string; null reads as empty)."""
    message = _mapping(choice.get("message"), f"{where}: 'message'")
    return _text(message.get("content"), f"{where}: 'message.content'")


def finish_reason(choice: dict[str, Any], where: str) -> str | None:
    """A choice's ``finish_reason`` (a string or null)."""
    reason = choice.get("finish_reason")
    if reason is not None and not isinstance(reason, str):
        raise InvalidAnswer(f"{where}: 'finish_reason' is not a string")
    return reason


def _top(value: Any, where: str, width: int) -> dict[str, float]:
    """One position's top-k mapping: non-empty when ``width`` > 0, every value a log-prob."""
    top = _mapping(value, where)
    if width > 0 and not top:
        raise InvalidAnswer(f"{where} is empty")
    return {str(token): logprob(v, f"{where} entry") for token, v in top.items()}


def completion_logprobs(choice: dict[str, Any], where: str, *, width: int, echo: bool = False) -> LogprobBlock:
    """A completion choice's ``logprobs`` block, checked (see the module docstring): ``width`` is the number of
    alternatives asked per position (0: none asked, the top-k list may be absent); ``echo``: position 0 is the first
    prompt token, whose log-prob and top-k are null.

    A block in the chat form (``content``: one item per token, no ``tokens`` list) is read as :func:`chat_logprobs`
    reads it: llama.cpp's ``llama-server`` answers ``/v1/completions`` so. That form carries no echoed prompt."""
    block = _mapping(choice.get("logprobs"), f"{where}: 'logprobs'")
    if "tokens" not in block and "content" in block:
        if echo:
            raise InvalidAnswer(f"{where}: 'logprobs.content' (the per-token form) holds no echoed prompt")
        return chat_logprobs(choice, where, width=width)
    tokens = _list(block.get("tokens"), f"{where}: 'logprobs.tokens'")
    raw_values = _list(block.get("token_logprobs"), f"{where}: 'logprobs.token_logprobs'")
    raw_tops = block.get("top_logprobs")
    if raw_tops is None and width == 0:
        raw_tops = [None] * len(tokens)
    raw_tops = _list(raw_tops, f"{where}: 'logprobs.top_logprobs'")
    if not len(tokens) == len(raw_values) == len(raw_tops):
        raise InvalidAnswer(
            f"{where}: {len(tokens)} tokens, {len(raw_values)} log-probs and {len(raw_tops)} top-k entries"
            " (one of each per token)"
        )
    values: list[float] = []
    tops: list[dict[str, float] | None] = []
    for i, (token, value, top) in enumerate(zip(tokens, raw_values, raw_tops, strict=True)):
        if not isinstance(token, str):
            raise InvalidAnswer(f"{where}: token {i} is not a string")
        if echo and i == 0 and value is None:
            values.append(float("nan"))
            tops.append(None)
            continue
        values.append(logprob(value, f"{where}: log-prob {i}"))
        tops.append(None if top is None and width == 0 else _top(top, f"{where}: top-k {i}", width))
    return LogprobBlock([str(t) for t in tokens], values, tops)


def chat_logprobs(choice: dict[str, Any], where: str, *, width: int) -> LogprobBlock:
    """A chat choice's ``logprobs.content`` (one item per token: ``token``, ``logprob``, ``top_logprobs``), checked."""
    block = _mapping(choice.get("logprobs"), f"{where}: 'logprobs'")
    content = _list(block.get("content"), f"{where}: 'logprobs.content'")
    tokens: list[str] = []
    values: list[float] = []
    tops: list[dict[str, float] | None] = []
    for i, raw in enumerate(content):
        item = _mapping(raw, f"{where}: token {i}")
        token = item.get("token")
        if not isinstance(token, str):
            raise InvalidAnswer(f"{where}: token {i} is not a string")
        tokens.append(token)
        values.append(logprob(item.get("logprob"), f"{where}: log-prob {i}"))
        alternatives = _list(item.get("top_logprobs") or [], f"{where}: top-k {i}")
        if width > 0 and not alternatives:
            raise InvalidAnswer(f"{where}: top-k {i} is empty")
        top: dict[str, float] = {}
        for alternative in alternatives:
            entry = _mapping(alternative, f"{where}: top-k {i} entry")
            name = entry.get("token")
            if not isinstance(name, str):
                raise InvalidAnswer(f"{where}: top-k {i} has an entry without a token string")
            top.setdefault(name, logprob(entry.get("logprob"), f"{where}: top-k {i} entry"))
        tops.append(top if width > 0 or alternatives else None)  # as the legacy form: kept when given
    return LogprobBlock(tokens, values, tops)


def usage_tokens(answer: dict[str, Any]) -> tuple[int, int]:
    """``(prompt_tokens, completion_tokens)`` of an answer's ``usage`` (0 where absent; negative or non-integer
    counts are refused)."""
    usage = answer.get("usage") or {}
    if not isinstance(usage, dict):
        raise InvalidAnswer("'usage' is not an object")
    out = []
    for name in ("prompt_tokens", "completion_tokens"):
        value = usage.get(name) or 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidAnswer(f"'usage.{name}' is not a count")
        out.append(value)
    return out[0], out[1]
