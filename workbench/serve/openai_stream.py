"""Streamed answers (``stream: true``): OpenAI's chunk objects sent as server-sent events, as OpenAI and vLLM send
them (docs/served-models.md).

A streamed response is ``text/event-stream``: one ``data: {chunk}`` event per piece of an answer, then ``data:
[DONE]``. A request is checked, queued and answered exactly as when it is not streamed. The stream begins once its
answer is ready or — where the answering function reports answers so far (``serve-model``'s continuous batching: a
:class:`ProgressFeed` per request) — once its first piece is settled (:func:`settled`); every refusal (400, 404, 503,
504 …) before that is still an ordinary JSON error with its status, never an event in a stream that began with 200.
The chunks carry the answer piece by piece, the same chunks whether sent live or from the whole answer (an answer
so far gives the first chunks of the whole answer's: :func:`answered_so_far`):

* ``/v1/completions`` — ``object: "text_completion"``; one chunk per listed token of each choice (``text`` its
  piece, ``logprobs`` the entries of that token when the request asked for them), the choice's last chunk carrying
  its ``finish_reason``;
* ``/v1/chat/completions`` — ``object: "chat.completion.chunk"``; per choice a first ``delta`` ``{"role":
  "assistant", "content": ""}``, one ``delta.content`` per token (with its ``logprobs.content`` entry when asked
  for), then an empty ``delta`` with the ``finish_reason``;
* ``stream_options: {"include_usage": true}`` — one more chunk before ``[DONE]``: ``choices: []`` and the request's
  ``usage`` (other chunks then carry ``usage: null``, as OpenAI writes them).

Imports pydantic and Starlette only.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict
from starlette.responses import StreamingResponse

DONE = "data: [DONE]\n\n"
"""The event that ends every stream."""


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` adds a last chunk with the request's ``usage`` (and no choices)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    include_usage: bool | None = None


def event(chunk: dict[str, Any]) -> str:
    """One chunk as a server-sent ``data:`` event."""
    return f"data: {json.dumps(chunk, ensure_ascii=False, separators=(',', ':'))}\n\n"


def event_stream(chunks: Iterable[dict[str, Any]]) -> StreamingResponse:
    """A ``text/event-stream`` response sending each chunk as a ``data:`` event, then ``data: [DONE]``."""

    def events() -> Iterator[str]:
        for chunk in chunks:
            yield event(chunk)
        yield DONE

    return events_response(events())


def events_response(events: Iterator[str] | AsyncIterator[str]) -> StreamingResponse:
    """A ``text/event-stream`` response sending ``events`` (already formatted) as they come."""
    # no-cache and no proxy buffering: each event reaches the client as it is written
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events, media_type="text/event-stream", headers=headers)


def split_pieces(text: str, starts: Sequence[int]) -> list[str]:
    """``text`` cut at ``starts`` (character offsets, not decreasing): piece i runs from ``starts[i]`` (the first
    from 0) to ``starts[i + 1]`` (the last to the end), so the pieces join to ``text``; no offsets: one piece."""
    if not starts:
        return [text]
    bounds = [0, *starts[1:], len(text)]
    return [text[bounds[i] : max(bounds[i], bounds[i + 1])] for i in range(len(starts))]


def settled(text: str, starts: Sequence[int], hold: int) -> int:
    """How many leading pieces of a choice still being decoded can be sent (``text`` the decoding of its tokens so
    far, ``starts`` where its pieces begin, as :func:`split_pieces` takes them): they are then exactly the first
    pieces of the finished choice. Never the last piece (the next token may still change how it decodes), none ending
    past a trailing U+FFFD (a character whose bytes are not all decoded yet: a broken character is never sent) and
    none ending within ``hold`` characters of the end (the longest stop string's length - 1: one may yet begin
    there, and the finished text is cut before it)."""
    limit = len(text.rstrip("\ufffd")) - hold
    count = 0
    for j in range(1, len(starts)):  # piece j - 1 ends where piece j begins
        if starts[j] > limit:
            break
        count = j
    return count


def answered_so_far(states: dict[int, Any], count: int) -> tuple[list[tuple[dict[str, Any], list[int]]], bool, bool]:
    """``(choices, complete, decoding)`` for :func:`completion_chunks` / :func:`chat_chunks` from the answers so far
    of a request's ``count`` works (``states[i]``: work i's latest answer, with ``choices``, ``pieces`` and ``open``),
    in the order the complete answer lists them: up to the first work not yet started or the first choice still
    decoding (included, with its settled pieces)."""
    choices: list[tuple[dict[str, Any], list[int]]] = []
    for i in range(count):
        answer = states.get(i)
        if answer is None:
            return choices, False, False
        still = answer.open or [False] * len(answer.choices)
        for choice, starts, decoding in zip(answer.choices, answer.pieces or [], still, strict=True):
            choices.append((choice, starts))
            if decoding:
                return choices, False, True
    return choices, True, False


class ProgressFeed:
    """A streamed request's answers so far, handed over from the answering thread (:attr:`Job.progress
    <workbench.serve.scheduler.Job.progress>`: called as ``feed(index, answer)``) to the event loop ``loop``, where
    :meth:`next` returns them. Only each work's latest answer is kept: a client that reads slowly gets fewer, larger
    updates, and memory stays one answer per work."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._latest: dict[int, Any] = {}
        self._changed = asyncio.Event()

    def __call__(self, index: int, answer: Any) -> None:
        self._loop.call_soon_threadsafe(self._put, index, answer)

    def _put(self, index: int, answer: Any) -> None:
        self._latest[index] = answer
        self._changed.set()

    async def next(self) -> dict[int, Any]:
        """The works' answers reported since the last call (``{index: answer}``, each work's latest), once there are
        any."""
        await self._changed.wait()
        self._changed.clear()
        latest, self._latest = self._latest, {}
        return latest


def usage_chunk(head: dict[str, Any], usage: dict[str, int]) -> dict[str, Any]:
    """The ``include_usage`` chunk: no choices, the request's ``usage``."""
    return {**head, "choices": [], "usage": usage}


def completion_chunks(
    head: dict[str, Any],
    choices: Sequence[tuple[dict[str, Any], list[int]]],
    usage: dict[str, int] | None,
    *,
    complete: bool = True,
    decoding: bool = False,
) -> Iterator[dict[str, Any]]:
    """The chunks of a streamed ``/v1/completions`` answer: ``head`` is ``{"id", "object", "created", "model"}``,
    ``choices`` each choice (as the whole answer writes it, without ``index``) with where its pieces begin;
    ``usage`` (or None) adds the usage chunk. An answer so far: ``complete`` False (the choices listed are the first
    ones; no usage chunk yet), ``decoding`` True when the last of them is still being decoded (its settled pieces,
    :func:`settled`, with no ``finish_reason``) — its chunks are then the first ones of the complete answer's."""
    tail = {"usage": None} if usage is not None else {}
    for index, (choice, starts) in enumerate(choices):
        block = choice.get("logprobs")
        open_choice = decoding and index == len(choices) - 1
        pieces = split_pieces(choice["text"], starts) if starts or not open_choice else []  # none settled yet
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1 and not open_choice
            if not piece and block is None and not last:
                continue  # a token that adds no character (part of one): nothing to send without its log-prob
            logprobs = None if block is None else {field: values[i : i + 1] for field, values in block.items()}
            finish = choice["finish_reason"] if last else None
            entry = {"index": index, "text": piece, "logprobs": logprobs, "finish_reason": finish}
            yield {**head, "choices": [entry], **tail}
    if usage is not None and complete:
        yield usage_chunk(head, usage)


def chat_chunks(
    head: dict[str, Any],
    choices: Sequence[tuple[dict[str, Any], list[int]]],
    usage: dict[str, int] | None,
    extra: dict[str, Any] | None = None,
    *,
    complete: bool = True,
    decoding: bool = False,
) -> Iterator[dict[str, Any]]:
    """The chunks of a streamed ``/v1/chat/completions`` answer (``head``, ``choices``, ``complete`` and
    ``decoding`` as for :func:`completion_chunks`, each choice with its ``message``); ``extra`` fields (the bundle's
    ``workbench`` record) ride on each choice's last chunk."""
    tail = {"usage": None} if usage is not None else {}
    for index, (choice, starts) in enumerate(choices):
        entries = (choice.get("logprobs") or {}).get("content")
        opening = {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None}
        yield {**head, "choices": [{**opening, "finish_reason": None}], **tail}
        open_choice = decoding and index == len(choices) - 1
        text = choice["message"]["content"] or ""
        for i, piece in enumerate(split_pieces(text, starts) if starts or not open_choice else []):
            if not piece and entries is None:
                continue
            logprobs = None if entries is None else {"content": entries[i : i + 1]}
            delta = {"index": index, "delta": {"content": piece}, "logprobs": logprobs, "finish_reason": None}
            yield {**head, "choices": [delta], **tail}
        if open_choice:
            return  # still decoding: no closing chunk, no usage
        closing = {"index": index, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}
        yield {**head, "choices": [closing], **tail, **(extra or {})}
    if usage is not None and complete:
        yield usage_chunk(head, usage)
