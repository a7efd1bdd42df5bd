"""``workbench serve``'s OpenAI-compatible face: a bundle's methods as chat models (``/v1/models``,
``/v1/chat/completions``). The request and response models and the mapping to and from the bundle's answers; the
routes themselves are in :mod:`workbench.serve.chat_routes`, on the same scheduler and limits as ``POST /answer``.

Contract:

* **models** — one per method of the bundle, its id the method's name (``dtr``, ``no_rag``, …).
* **the question** — the content of the LAST ``user`` message (a string, or a list of ``{"type": "text", "text"}``
  parts joined with newlines). System, developer, assistant and earlier user messages are accepted and ignored: a
  method answers one question, its prompts are the bundle's own.
* **parameters** — ``temperature``, ``top_p``, ``max_tokens``, ``max_completion_tokens``, ``seed``, ``user``,
  ``stop``, ``presence_penalty`` and ``frequency_penalty`` are accepted and ignored (the method's recipe decides the
  decoding). ``n`` > 1, ``tools``, ``tool_choice`` (other than ``"none"``), ``logprobs: true``,
  ``top_logprobs`` and a ``response_format`` other than text cannot be honoured: 400 naming the field. Any other field
  is refused as unknown (400), as OpenAI refuses one.
* **the reply** — a standard ``chat.completion``: ``choices[0].message.content`` is the method's answer,
  ``finish_reason`` ``"stop"``, ``model`` the method, ``usage`` the answer's LM tokens (prompt = tokens the model read,
  completion = tokens it generated, over all of the method's LM calls; a batched stage's share is rounded to whole
  tokens). The decision rides in the top-level extension field ``workbench``: the ``POST /answer`` answer record
  (:meth:`~workbench.runtime.runtime.RuntimeAnswer.to_dict` without ``trace``) plus ``"bundle": {"name",
  "version"}``.
* **streaming** — ``stream: true`` sends the same answer as server-sent events (:mod:`workbench.serve.openai_stream`):
  the runtime answers whole, so the stream is the role chunk, ONE content chunk holding the whole answer, and the
  closing chunk with ``finish_reason`` and the ``workbench`` field; ``stream_options.include_usage`` adds the usage
  chunk. Refusals are still JSON errors (the stream begins once the answer is ready).
* **errors** — every error on a ``/v1/`` path is OpenAI-shaped: ``{"error": {"message": "<one line>", "type",
  "param", "code"}}``; an invalid request is 400 (``POST /answer``'s 422), an unknown model 404 with ``code:
  "model_not_found"``; 413, 503 (``Retry-After``), 504 and 500 as on ``/answer``.

Imports pydantic and Starlette only (nothing of the app, whose routes import this module).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send

from workbench.serve.body_limit import BodySizeLimit
from workbench.serve.field_checks import has_lone_surrogate
from workbench.serve.openai_stream import StreamOptions, chat_chunks

V1 = "/v1"


def is_v1(path: str) -> bool:
    """True for a path under ``/v1`` (its errors are OpenAI-shaped)."""
    return path == V1 or path.startswith(V1 + "/")


# ---------------------------------------------------------------------------------------------------- request


class ChatMessage(BaseModel):
    """One message. Only the last ``user`` message is read (its ``content``); other fields (``name``,
    ``tool_calls``, …) are accepted and ignored."""

    model_config = ConfigDict(extra="allow", strict=True)

    role: str = Field(description="system, developer, user, assistant, tool …; only the last user message is read.")
    content: Any = Field(
        None, description='A string, or a list of {"type": "text", "text": "..."} parts (joined with newlines).'
    )


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions``: ``model`` names one of the bundle's methods; the question is the content of the
    last user message. See the module docstring for the parameters refused and those ignored."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "model": "no_rag",
                    "messages": [
                        {"role": "system", "content": "ignored: the method's prompts are the bundle's"},
                        {"role": "user", "content": "Who wrote The Old Man and the Sea?"},
                    ],
                }
            ]
        },
    )

    model: str = Field(description="A method of the bundle (see GET /v1/models).")
    messages: list[ChatMessage] = Field(min_length=1, description="The question is the last user message's content.")
    # cannot be honoured unless left at their defaults (400 otherwise)
    n: int | None = Field(None, ge=1, description="1 only: a method gives one answer.")
    stream: bool | None = Field(
        None, description="true: server-sent events (the answer is computed whole, then sent as one content chunk)."
    )
    stream_options: StreamOptions | None = Field(None, description="include_usage: a last chunk with the usage.")
    tools: list[dict[str, Any]] | None = Field(None, description="Not supported (none or an empty list only).")
    tool_choice: Any = Field(None, description='Not supported ("none" only).')
    logprobs: bool | None = Field(None, description="false only.")
    top_logprobs: int | None = Field(None, description="Not supported (0 only).")
    response_format: dict[str, Any] | None = Field(None, description='{"type": "text"} only.')
    # accepted and ignored: the method's recipe decides the decoding
    temperature: float | None = Field(None, description="Ignored.")
    top_p: float | None = Field(None, description="Ignored.")
    max_tokens: int | None = Field(None, description="Ignored.")
    max_completion_tokens: int | None = Field(None, description="Ignored.")
    seed: int | None = Field(None, description="Ignored.")
    user: str | None = Field(None, description="Ignored.")
    stop: str | list[str] | None = Field(None, description="Ignored.")
    presence_penalty: float | None = Field(None, description="Ignored.")
    frequency_penalty: float | None = Field(None, description="Ignored.")


class ChatError(Exception):
    """A refused chat request: ``status`` (400 or 404), a one-line ``message``, the ``param`` at fault and an OpenAI
    ``code`` (or None)."""

    def __init__(self, status: int, message: str, param: str | None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def refused_parameter(body: ChatCompletionRequest) -> ChatError | None:
    """The first parameter of ``body`` a bundle cannot honour, as a 400 :class:`ChatError`; None when all can be."""
    unsupported = (
        ("n", body.n is not None and body.n > 1, f"n={body.n}: a method gives one answer (n 1)"),
        ("tools", bool(body.tools), "tools are not supported: a bundle's method answers the question itself"),
        (
            "tool_choice",
            body.tool_choice is not None and body.tool_choice != "none",
            'tool_choice is not supported (only "none")',
        ),
        ("logprobs", body.logprobs is True, "logprobs are not supported (logprobs false)"),
        ("top_logprobs", bool(body.top_logprobs), "top_logprobs are not supported"),
        (
            "response_format",
            body.response_format is not None and body.response_format.get("type") != "text",
            'response_format other than {"type": "text"} is not supported: the answer is plain text',
        ),
    )
    for param, refused, message in unsupported:
        if refused:
            return ChatError(400, message, param)
    return None


def find_question(messages: Sequence[ChatMessage], max_chars: int, blank: Callable[[str], bool]) -> tuple[int, str]:
    """``(index, question)`` of the last user message: its content as text (text parts joined with newlines), within
    ``max_chars``, without a lone surrogate and not ``blank``; a 400 :class:`ChatError` naming the message
    (``param``) otherwise."""
    index = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
    if index is None:
        raise ChatError(400, "no user message: the question is the content of the last user message", "messages")
    where = f"messages[{index}].content"
    content = messages[index].content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text" or not isinstance(part.get("text"), str):
                got = f"type {kind!r}" if isinstance(kind, str) else f"a {type(part).__name__}"
                raise ChatError(
                    400,
                    f'{where}[{j}]: only {{"type": "text", "text": "..."}} parts are supported (got {got})',
                    f"{where}[{j}]",
                )
            texts.append(part["text"])
        content = "\n".join(texts)
    if not isinstance(content, str):
        raise ChatError(400, f"{where}: the question must be a string or a list of text parts", where)
    if has_lone_surrogate(content):
        raise ChatError(400, f"{where}: must be Unicode text (it holds a lone surrogate, U+D800..U+DFFF)", where)
    if blank(content):
        raise ChatError(400, f"{where}: must not be blank (it has no visible character)", where)
    if len(content) > max_chars:
        raise ChatError(400, f"{where}: {len(content)} characters, over the {max_chars}-character limit", where)
    return index, content


def chat_question(
    body: ChatCompletionRequest, methods: Sequence[str], max_chars: int, blank: Callable[[str], bool]
) -> tuple[int, str]:
    """``(index, question)`` of a chat request (see :func:`find_question`); :class:`ChatError` when its model is not
    one of ``methods`` (404), a parameter cannot be honoured or the question is refused (400)."""
    if body.model not in methods:
        raise unknown_model(body.model, methods)
    refused = refused_parameter(body)
    if refused is not None:
        raise refused
    return find_question(body.messages, max_chars, blank)


def unknown_model(model: str, methods: Sequence[str]) -> ChatError:
    """The 404 for a model that is not one of ``methods``."""
    return ChatError(
        404,
        f"the model {model!r} does not exist: this bundle's models are its methods ({', '.join(methods)})",
        "model",
        "model_not_found",
    )


# ---------------------------------------------------------------------------------------------------- responses


class ChatMessageOut(BaseModel):
    """The assistant's message: the method's answer."""

    role: str = "assistant"
    content: str
    refusal: None = None


class ChatChoice(BaseModel):
    """The one choice."""

    index: int = 0
    message: ChatMessageOut
    finish_reason: str = "stop"
    logprobs: None = None


class Usage(BaseModel):
    """The answer's LM tokens: read (prompt) and generated (completion), over all of the method's LM calls."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class BundleRef(BaseModel):
    """The bundle that answered."""

    name: str
    version: str


class WorkbenchDecision(BaseModel):
    """The ``workbench`` extension field: the ``POST /answer`` answer record (RuntimeAnswer without ``trace``) and the
    bundle. D²-RAG fills ``p_correct`` / ``tau`` / ``features`` / ``calibrated`` / ``utility_class``; other methods
    leave them null."""

    model_config = ConfigDict(extra="allow")

    question: str
    method: str
    text: str
    retrieved: bool
    decoding: str
    passages: list[dict[str, Any]]
    p_correct: float | None
    tau: float | None
    features: dict[str, float | None] | None
    calibrated: dict[str, float] | None
    utility_class: str | None
    lm_calls: float
    prompt_tokens: float
    generated_tokens: float
    tokens: float
    nli_pairs: float
    retrieval_calls: float
    latency_s: float
    fallbacks: int
    notes: list[str]
    bundle: BundleRef


class ChatCompletion(BaseModel):
    """``POST /v1/chat/completions``: a standard chat completion plus the ``workbench`` extension field."""

    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    workbench: WorkbenchDecision


class ModelCard(BaseModel):
    """One model: a method of the bundle."""

    id: str
    object: str = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    """``GET /v1/models``."""

    object: str = "list"
    data: list[ModelCard]


class OpenAIErrorDetail(BaseModel):
    """What went wrong: a one-line ``message``, its ``type``, the request ``param`` at fault, an optional ``code``."""

    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIErrorBody(BaseModel):
    """Every error on a ``/v1/`` path."""

    error: OpenAIErrorDetail


def completion_body(record: dict[str, Any], *, bundle: str, version: str) -> dict[str, Any]:
    """The chat completion of one ``/answer`` answer ``record`` (``RuntimeAnswer.to_dict()`` without ``trace``)."""
    prompt = round(float(record.get("prompt_tokens") or 0.0))
    completion = round(float(record.get("generated_tokens") or 0.0))
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": record["method"],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": record["text"], "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        "workbench": {**record, "bundle": {"name": bundle, "version": version}},
    }


def streamed_chunks(body: dict[str, Any], include_usage: bool) -> Iterator[dict[str, Any]]:
    """The chunks of a streamed chat answer from its whole :func:`completion_body`: the role chunk, one content
    chunk (the runtime answers whole), the closing chunk carrying the ``workbench`` field, and the usage chunk when
    ``include_usage``."""
    head = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"]}
    choices = [(choice, []) for choice in body["choices"]]
    usage = body["usage"] if include_usage else None
    return chat_chunks(head, choices, usage, {"workbench": body["workbench"]})


def created_at(stamp: Any, fallback: float) -> int:
    """Unix seconds of an ISO ``stamp`` (a manifest's ``created``), else ``fallback``."""
    try:
        return int(datetime.fromisoformat(str(stamp)).timestamp())
    except ValueError:
        return int(fallback)


def model_card(method: str, *, owned_by: str, created: int) -> dict[str, Any]:
    """One ``/v1/models`` entry: the method as a model, owned by the bundle, created when the bundle was exported."""
    return {"id": method, "object": "model", "created": created, "owned_by": owned_by}


# ---------------------------------------------------------------------------------------------------- errors


RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": OpenAIErrorBody, "description": description}
    for status, description in (
        (
            400,
            "Invalid request: a parameter a bundle cannot honour (n > 1, tools, logprobs …), an unknown field, "
            "no user message, a blank or over-long question (characters or tokens), a question the runtime refused",
        ),
        (404, "Unknown model (code model_not_found): the models are the bundle's methods"),
        (413, "Body over the size limit"),
        (500, "Server bug (logged)"),
        (503, "Queue full (see the Retry-After header) or shutting down"),
        (504, "Not answered within the request deadline"),
    )
}
"""The error responses of the ``/v1`` routes, for the OpenAPI description."""

STREAMED_RESPONSE: dict[str, Any] = {
    "description": "The chat completion (JSON), or with stream: true server-sent events: chat.completion.chunk "
    "objects as `data: {chunk}` lines, then `data: [DONE]`",
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}
"""The 200 response of ``/v1/chat/completions`` beside its JSON model: the streamed form (for the OpenAPI page)."""


def error_body(status: int, message: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """The OpenAI error body; ``type`` is ``invalid_request_error`` below 500, ``server_error`` from 500."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(
    status: int,
    message: str,
    headers: dict[str, str] | None = None,
    *,
    param: str | None = None,
    code: str | None = None,
) -> JSONResponse:
    """An OpenAI-shaped error response; ``POST /answer``'s 422 (an invalid request) is sent as OpenAI's 400."""
    status = 400 if status == 422 else status
    return JSONResponse(error_body(status, message, param=param, code=code), status_code=status, headers=headers)


def error_param(errors: Sequence[dict[str, Any]]) -> str | None:
    """The request field of the first pydantic error (``messages[0].role``), or None for a body that is not JSON."""
    if not errors:
        return None
    first = errors[0]
    loc = [p for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid" or not loc or isinstance(first.get("input"), bytes):
        return None
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


class V1BodySizeLimit(BodySizeLimit):
    """:class:`~workbench.serve.body_limit.BodySizeLimit` whose 413 is OpenAI-shaped on ``/v1`` paths (elsewhere
    unchanged: ``{"detail": ...}``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and is_v1(scope.get("path", "")):
            send = _openai_413(send)
        await super().__call__(scope, receive, send)


def _openai_413(send: Send) -> Send:
    """``send`` rewriting a 413 ``{"detail"}`` response into the OpenAI error shape (other responses pass)."""
    held: list[Message] = []

    async def rewrite(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] == 413:
            held.append(message)  # sent with the body, once its length is known
            return
        if held and message["type"] == "http.response.body":
            start = held.pop()
            try:
                detail = str(json.loads(message.get("body", b""))["detail"])
            except (ValueError, KeyError, TypeError):
                detail = "request body over the size limit"
            payload = json.dumps(error_body(413, detail)).encode()
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(payload)).encode()))
            await send({**start, "headers": headers})
            await send({**message, "body": payload, "more_body": False})
            return
        await send(message)

    return rewrite
