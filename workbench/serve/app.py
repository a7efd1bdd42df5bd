"""The JSON HTTP API over a bundle's :class:`~workbench.runtime.Runtime`: FastAPI app and uvicorn runner.

Routes: ``GET /health`` (liveness), ``GET /ready`` (readiness: :mod:`workbench.serve.readiness`), ``GET /methods``,
``POST /answer`` (one question or a batch), ``GET /docs`` (Swagger UI) and
``GET /redoc`` (ReDoc), both from assets shipped in a Python package (``fastapi-offline``), so they work offline, and
``GET /openapi.json``, and the OpenAI-compatible ``GET /v1/models`` and ``POST /v1/chat/completions`` (the bundle's
methods as chat models; see :mod:`workbench.serve.openai_bundle`). Every error body is ``{"detail": "<one line>"}``
(on ``/v1`` paths OpenAI's ``{"error": {...}}``, an invalid request 400), one status code per kind of failure:

====  =====================================================================================================
422   the request is invalid: malformed JSON (also a repeated key, NaN, nesting past 64 levels, a number of
      thousands of digits: :mod:`workbench.serve.strict_body`), an unknown field, a blank question (whitespace
      and zero-width or other invisible characters only) or one that is not Unicode text (a lone surrogate), a
      question over the character or token limit, too many questions, more questions than the method answers within
      the deadline at the fastest rate measured since start (a method's first batch left out), an unknown method, or
      a question the runtime refused (a :class:`~workbench.core.errors.WorkbenchError`)
413   the body is over the size limit (a chunked one is never read past the limit; a declared one of at most
      32 MiB is read and discarded first, so a client that sends it whole reads the 413, not a reset)
503   the queue is full (``Retry-After`` says when to retry) or the server is shutting down; ``GET /ready`` until
      the warm-up is done; the bundle's external retriever failed while answering and the bundle says
      ``on_failure: error`` (the body is the engine's one line, its URI without credentials)
504   the request was not answered within its deadline (``ServeLimits.timeout_s``, counted from its arrival)
404   unknown path; 405 a route asked with the wrong HTTP method
500   a server bug (logged with its traceback; the body never carries the exception's text)
====  =====================================================================================================

A client that disconnects gets nothing (the access log shows 499); its questions are dropped unanswered, and a
running batch whose every client left or passed its deadline is interrupted before the model's next forward
(:mod:`workbench.core.interrupt`). ``GET /health`` counts the answers computed and those flagged out of distribution
(``ood``), and reports a bundle's external retriever (``retriever``: backend, URI without credentials, index,
whether it answers now, its last error, the fingerprint check at load; null for an in-process one).

Answering is CPU work for one model: a :class:`~workbench.serve.scheduler.BatchScheduler` queues the requests (bounded)
and one worker thread answers every request waiting for the same method in one ``answer_many`` call, so concurrent
clients share forward batches (chat completions and ``/answer`` requests alike). ``/health`` and ``/ready`` are async
and never wait on the model.

This module imports FastAPI, Starlette and pydantic only; uvicorn is imported by :func:`run_server` alone. It needs the
asyncio event loop (uvicorn's, with or without uvloop).
"""

# No ``from __future__ import annotations``: the request model is built per app (its limits vary), and FastAPI and
# pydantic must see its annotations as objects, not as strings naming function locals.

import contextlib
import enum
import html
import importlib.util
import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    create_model,
    field_validator,
    model_validator,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

import workbench.serve.openai_bundle as oai
from workbench.core.errors import ConfigError, WorkbenchError
from workbench.runtime.questions import is_blank
from workbench.serve.readiness import WarmUp
from workbench.serve.scheduler import BatchScheduler, DeadlineExpired, Job, QueueFull, SchedulerClosed
from workbench.serve.strict_body import StrictJSONRoute, body_refusal
from workbench.serve.waiting import CLIENT_CLOSED, ClientGone, NotInTime, job_answers

logger = logging.getLogger("workbench.serve")

_MAX_DETAIL_CHARS = 500
DOCS_ASSETS = "/docs/assets"


@dataclass(frozen=True)
class ServeLimits:
    """Request limits and scheduling of the API; each count must be an integer >= 1 and ``timeout_s`` a number > 0
    (else a one-line :class:`ConfigError`).

    ``max_batch``: most questions in one ``POST /answer``; ``max_body_bytes``: largest request body (413 beyond);
    ``max_question_chars`` / ``max_question_tokens``: longest question in characters / in the generator's tokens
    (422 beyond); ``max_queue``: most questions waiting to be answered, over all requests (503 beyond; at least
    ``max_batch``, so any valid request can be queued); ``max_batch_questions``: most questions answered in one
    ``answer_many`` call across requests (the runtime's batch size is a good value); ``timeout_s``: seconds from a
    request's arrival to its answer (504 beyond; work not started by then is dropped, a running batch of requests all
    past it interrupted).
    """

    max_batch: int = 32
    max_body_bytes: int = 65536
    max_question_chars: int = 2000
    max_question_tokens: int = 256
    max_queue: int = 128
    max_batch_questions: int = 8
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        counts = (
            "max_batch",
            "max_body_bytes",
            "max_question_chars",
            "max_question_tokens",
            "max_queue",
            "max_batch_questions",
        )
        for name in counts:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}", f"serve.{name}")
        timeout = self.timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not (0 < timeout < math.inf):
            raise ConfigError(f"timeout_s must be a number of seconds > 0, got {timeout!r}", "serve.timeout_s")
        if self.max_queue < self.max_batch:
            raise ConfigError(
                f"max_queue ({self.max_queue}) must be >= max_batch ({self.max_batch}): a full request could never "
                "be queued",
                "serve.max_queue",
            )


_DEFAULT_LIMITS = ServeLimits()

ErrorFn = Callable[..., JSONResponse]
"""Makes an error response: ``(status, detail, headers=None)``; ``_error``, or on ``/v1`` an OpenAI-shaped one."""


class ServableRuntime(Protocol):
    """What the API needs of a runtime (:class:`~workbench.runtime.Runtime` has it; tests use fakes)."""

    name: str
    version: str
    methods: tuple[str, ...]
    method_options: dict[str, dict[str, Any]]

    def info(self) -> dict[str, Any]:
        """JSON-ready description with a ``decision`` block."""
        ...

    def answer_many(
        self, questions: Sequence[str], method: str | None = None, batch_size: int | None = None
    ) -> list[Any]:
        """Answers (objects with ``to_dict()`` and an ``ood`` attribute: a dict or None), one per question, in
        order."""
        ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Each text's length in the generator's tokens; safe to call while an answer runs."""
        ...

    def warm(self, methods: Sequence[str] | None = None, *, answer: bool = False) -> Any:
        """Load every method's models now and, with ``answer``, answer one warm-up question with each."""
        ...


class ErrorBody(BaseModel):
    """Every error response: one line saying what is wrong."""

    detail: str


class RetrieverHealth(BaseModel):
    """A bundle's external retriever in ``GET /health`` (:meth:`workbench.runtime.Runtime.retriever_status`)."""

    backend: str
    uri: str
    index: str
    on_failure: str
    reachable: bool | None
    error: str | None
    last_error: str | None
    fingerprint: str | None


class QueueInfo(BaseModel):
    """The answer queue: questions waiting and being answered, the limit, and counts since start (``interrupted``:
    batches stopped while running because every client left, or at shutdown)."""

    queued: int
    queued_requests: int
    running: int
    limit: int
    batches: int
    answered: int
    dropped: int
    interrupted: int


class OODCounts(BaseModel):
    """Answers computed since start that were checked for being out of distribution (docs/ood.md: the bundle has an
    OOD profile), how many were ``flagged``, and what the flag did: ``reported`` (only in the answer), ``retrieved``
    (D²-RAG retrieved because of it) or ``refused`` (no answer)."""

    checked: int
    flagged: int
    reported: int
    retrieved: int
    refused: int


class OODTally:
    """Thread-safe :class:`OODCounts` of the answers' ``ood`` blocks: the answering worker adds, ``/health`` reads."""

    ACTIONS = ("reported", "retrieved", "refused")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(("checked", "flagged", *self.ACTIONS), 0)

    def add(self, answers: Sequence[Any]) -> None:
        """Count each answer's ``ood`` block (``{"flag", "checks", "action"}``; None: not checked)."""
        with self._lock:
            for answer in answers:
                ood = getattr(answer, "ood", None)
                if not isinstance(ood, dict):
                    continue
                self._counts["checked"] += 1
                self._counts["flagged"] += bool(ood.get("flag"))
                if ood.get("action") in self.ACTIONS:
                    self._counts[ood["action"]] += 1

    def counts(self) -> dict[str, int]:
        """The :class:`OODCounts` fields, since start."""
        with self._lock:
            return dict(self._counts)


class HealthBody(BaseModel):
    """``GET /health``: liveness (the process answers), whether it is ``ready`` (``GET /ready``), the bundle, the
    queue and the OOD counts."""

    status: str = "ok"
    ready: bool
    bundle: str
    version: str
    methods: list[str]
    queue: QueueInfo
    ood: OODCounts
    retriever: RetrieverHealth | None = None


class ReadyBody(BaseModel):
    """``GET /ready`` once the server is warm: every method's models loaded and one warm-up answer run with each
    (``warm_up_s``: how long that took; 0 with ``serve --lazy``, which warms nothing)."""

    status: Literal["ready"] = "ready"
    warm_up_s: float


class MethodInfo(BaseModel):
    """One method of the bundle with its settings."""

    name: str
    default: bool
    options: dict[str, Any]


class MethodsBody(BaseModel):
    """``GET /methods``: the methods, the default one, and the bundle's retrieval decision (or null) as its manifest
    records it (the runtime's ``info()``: :func:`workbench.bundle.shipped.decision_view` — rule, features, τ and who
    set it, α, the held-out figures at that τ, and the one-line ``summary`` every reader prints)."""

    bundle: str
    version: str
    default: str
    methods: list[MethodInfo]
    decision: dict[str, Any] | None


class OODInfo(BaseModel):
    """An answer's out-of-distribution check (docs/ood.md): ``flag``, the failed ``checks`` and what the flag did
    (``action``: null, ``reported``, ``retrieved`` or ``refused``)."""

    flag: bool
    checks: list[str]
    action: Literal["reported", "retrieved", "refused"] | None = None


class PassageRef(BaseModel):
    """A passage that reached the final prompt."""

    id: str = Field(description="The chunk id in the bundle's corpus: `<doc_id>#<chunk index>`.")
    title: str | None = Field(description="The title of the passage's document (null when the corpus has none).")


class AnswerRecord(BaseModel):
    """One answer and how it was reached: ``RuntimeAnswer.to_dict()`` (docs/bundles.md), every field typed.
    ``create_app`` narrows ``method`` to the enum of the served bundle's methods."""

    question: str = Field(description="The question, as asked.")
    method: str = Field(description="The method that answered.")
    text: str = Field(description='The answer ("" when the question was refused as out of distribution).')
    retrieved: bool = Field(description="Whether retrieved text reached the final prompt.")
    decoding: str = Field(
        description="How the answer was decoded: `greedy`, `contrastive` (D²-RAG's utility-aware contrastive "
        "decoding) or `none` (refused, nothing generated)."
    )
    passages: list[PassageRef] = Field(description="The passages in the final prompt, in prompt order.")
    p_correct: float | None = Field(
        None, description="D²-RAG: calibrated P(the closed-book answer is correct); null for other methods."
    )
    tau: float | None = Field(None, description="D²-RAG: the threshold; it retrieves when p_correct < tau.")
    features: dict[str, float | None] | None = Field(
        None, description="D²-RAG: the raw uncertainty features of the decision (null: not finite / other methods)."
    )
    calibrated: dict[str, float] | None = Field(None, description="D²-RAG: the same features after calibration.")
    utility_class: Literal["closed", "relevant", "neutral", "noisy"] | None = Field(
        None, description="D²-RAG: the retrieved context's utility class, which picks the decoding mode."
    )
    ood: OODInfo | None = Field(None, description="The out-of-distribution check; null when the bundle has none.")
    lm_calls: float = Field(description="Prompts run through the model for this answer (a batch's share).")
    prompt_tokens: float = Field(description="Prompt tokens (prefill) spent on this answer (may be a fraction).")
    generated_tokens: float = Field(description="Tokens decoded for this answer (may be a fraction).")
    tokens: float = Field(description="prompt_tokens + generated_tokens.")
    nli_pairs: float = Field(description="Pairs judged by the NLI / equivalence judge.")
    retrieval_calls: float = Field(description="Retriever queries.")
    latency_s: float = Field(description="Wall time of the answer's steps in seconds (a shared step: its share).")
    fallbacks: int = Field(description="Recovered failures (a step that fell back to a simpler one).")
    notes: list[str] = Field(description="Recovered failures and departures from the bundle, one line each.")
    trace: dict[str, Any] | None = Field(
        None, description="Every step with its decisions and cost; present only when the request set `traces`."
    )


class AnswerBody(BaseModel):
    """``POST /answer``: one answer per question, in order. ``create_app`` narrows ``method`` to the enum of the
    served bundle's methods."""

    bundle: str = Field(description="The bundle's name.")
    version: str = Field(description="The bundle's version.")
    method: str = Field(description="The method that answered every question of the request.")
    answers: list[AnswerRecord] = Field(description="One answer per question, in the order asked.")


def method_enum(methods: Sequence[str]) -> type[enum.Enum]:
    """``Method``: a string enum of the served bundle's methods (its values are the method names), so the OpenAPI
    schema lists them and generated clients get a real type."""
    members = [(m if m.isidentifier() and not m.startswith("_") else f"method_{i}", m) for i, m in enumerate(methods)]
    return enum.Enum("Method", members, type=str)


def _typed_answers(method_type: type[enum.Enum]) -> type[BaseModel]:
    """:class:`AnswerBody` (and its :class:`AnswerRecord`) with ``method`` typed as ``method_type``. Documentation
    only: the endpoint sends ``RuntimeAnswer.to_dict()`` as JSON, unchanged."""
    description = AnswerRecord.model_fields["method"].description
    record = create_model(
        "AnswerRecord",
        __base__=AnswerRecord,
        __doc__=AnswerRecord.__doc__,
        method=(method_type, Field(description=description)),
    )
    return create_model(
        "AnswerBody",
        __base__=AnswerBody,
        __doc__=AnswerBody.__doc__,
        method=(method_type, Field(description=AnswerBody.model_fields["method"].description)),
        answers=(list[record], Field(description=AnswerBody.model_fields["answers"].description)),
    )


def _not_blank(value: str) -> str:
    # a lone surrogate never gets here: pydantic refuses it as "not a valid string" (no tokenizer would take it)
    if is_blank(value):
        raise ValueError("must not be blank (it has no visible character)")
    return value


def _request_model(
    limits: ServeLimits, methods: Sequence[str], method_type: type[enum.Enum] | None = None
) -> type[BaseModel]:
    """The ``POST /answer`` body, its constraints taken from ``limits``; ``method`` an enum of ``methods``
    (``method_type``, made by :func:`method_enum` when not given)."""
    method_type = method_type or method_enum(methods)
    by_value = {member.value: member for member in method_type}
    question_type = Annotated[
        str, StringConstraints(min_length=1, max_length=limits.max_question_chars), AfterValidator(_not_blank)
    ]
    known = ", ".join(methods)

    class AnswerRequest(BaseModel):
        """Exactly one of ``question`` / ``questions``; ``method`` defaults to the bundle's default method.

        Unknown fields are refused (a gold ``answers`` field must never reach a method).
        """

        # strict: no silent coercion ("traces": "no" is an error, not True)
        model_config = ConfigDict(
            extra="forbid",
            strict=True,
            json_schema_extra={
                "examples": [
                    {"question": "Who wrote The Old Man and the Sea?"},
                    {"questions": ["What is the capital of Peru?", "When did Apollo 11 land?"], "traces": False},
                ]
            },
        )

        question: question_type | None = Field(None, description="One question.")
        questions: list[question_type] | None = Field(
            None, min_length=1, max_length=limits.max_batch, description=f"1 to {limits.max_batch} questions."
        )
        method: method_type | None = Field(  # type: ignore[valid-type]
            None, description=f"The method that answers (one of: {known}); null: the bundle's default."
        )
        traces: bool = Field(False, description="Include each answer's full step-by-step trace.")
        on_ood: Literal["flag", "retrieve", "refuse"] | None = Field(
            None,
            description="What an out-of-distribution flag does: flag (only report it in the answer's `ood`), retrieve "
            "(D²-RAG retrieves), refuse (no answer); null: the server's setting (docs/ood.md).",
        )

        @field_validator("method", mode="before")
        @classmethod
        def _known_method(cls, value: Any) -> Any:
            # a method name (JSON has no enum type) becomes its member; an unknown name is refused in one line
            if isinstance(value, str):
                if value not in by_value:
                    raise ValueError(f"unknown method {value!r}; this bundle has: {known}")
                return by_value[value]
            return value

        @model_validator(mode="after")
        def _exactly_one(self) -> "AnswerRequest":
            if (self.question is None) == (self.questions is None):
                raise ValueError("give exactly one of 'question' or 'questions'")
            return self

    return AnswerRequest


def _one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= _MAX_DETAIL_CHARS else line[: _MAX_DETAIL_CHARS - 1] + "…"


def _error(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": _one_line(detail)}, status_code=status, headers=headers)


def _v1_error(
    status: int,
    detail: str,
    headers: dict[str, str] | None = None,
    *,
    param: str | None = None,
    code: str | None = None,
) -> JSONResponse:
    return oai.error_response(status, _one_line(detail), headers, param=param, code=code)


def _answer_record(answer: Any, traces: bool) -> dict[str, Any]:
    """One answer as ``POST /answer`` sends it (and the chat route's ``workbench`` field): ``to_dict()``, without
    ``trace`` unless ``traces``."""
    record = answer.to_dict()
    if not traces:
        record.pop("trace", None)
    return record


def _validation_detail(errors: Sequence[dict[str, Any]], fields: Sequence[str]) -> str:
    """pydantic/FastAPI error list → one line such as ``questions[2]: String should have at most 100 characters``."""
    parts = []
    for err in errors:
        loc = [p for p in err.get("loc", ()) if p != "body"]
        kind = err.get("type", "")
        if kind == "json_invalid":
            where = f" (at character {loc[0]})" if loc else ""
            parts.append(f"malformed JSON body: {(err.get('ctx') or {}).get('error', 'decode error')}{where}")
            continue
        if kind == "extra_forbidden":
            parts.append(f"unknown field {'.'.join(map(str, loc))!r} (allowed: {', '.join(fields)})")
            continue
        if (kind == "missing" and not loc) or isinstance(err.get("input"), bytes):
            # no body, or a body FastAPI did not parse as JSON (its Content-Type is not application/json)
            parts.append("send a JSON object body with Content-Type: application/json")
            continue
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "body"
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {message}")
    if not parts:
        return "invalid request"
    more = f" (and {len(parts) - 3} more)" if len(parts) > 3 else ""
    return "; ".join(parts[:3]) + more


def _json_safe(value: Any) -> Any:
    """Non-finite floats → null, numpy scalars/arrays → Python values (JSON has no NaN; Starlette refuses it)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, str | int):
        return value
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return _json_safe(tolist())
    return str(value)


def _docs_assets() -> Path | None:
    """The folder of Swagger UI / ReDoc assets shipped by the ``fastapi-offline`` package (None when absent).

    Found without importing the package: only its static files are used.
    """
    spec = importlib.util.find_spec("fastapi_offline")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        folder = Path(location) / "static"
        if all((folder / name).is_file() for name in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js")):
            return folder
    return None


def _token_detail(labels: Sequence[str], counts: Sequence[int], limit: int) -> str | None:
    """One line naming the questions over ``limit`` tokens, or None when all fit."""
    over = [f"{label}: {count} tokens" for label, count in zip(labels, counts, strict=True) if count > limit]
    if not over:
        return None
    more = f" (and {len(over) - 3} more)" if len(over) > 3 else ""
    return f"{'; '.join(over[:3])}{more}, over the {limit}-token limit per question (the generator's tokenizer)"


def _work_detail(questions: int, method: str, fastest_s: float | None, timeout_s: float) -> str | None:
    """One line refusing ``questions`` for ``method`` when even at the fastest rate the server has answered it
    (``fastest_s`` seconds per question; None: never yet) they would take longer than ``timeout_s``; None when they
    may fit. A single question is always tried (the deadline interrupts it)."""
    if fastest_s is None or questions <= 1 or questions * fastest_s <= timeout_s:
        return None
    fits = max(1, math.floor(timeout_s / fastest_s))
    return (
        f"{questions} questions for {method} need at least {questions * fastest_s:.0f} s at the fastest rate this "
        f"server has answered it ({fastest_s:.2g} s per question), over the {timeout_s:g} s deadline: send at most "
        f"{fits} per request"
    )


def create_app(runtime: ServableRuntime, limits: ServeLimits = _DEFAULT_LIMITS, *, warm: bool = True) -> FastAPI:
    """A FastAPI app serving ``runtime`` under ``limits`` (see the module docstring for routes and status codes).

    ``GET /health`` (liveness: 200 as soon as the server runs) → ``{"status": "ok", "ready", "bundle", "version",
    "methods", "queue", "ood"}``; ``GET /ready`` (readiness) → 200 ``{"status": "ready", "warm_up_s"}`` once the
    app's :class:`~workbench.serve.readiness.WarmUp` is done, 503 before: with ``warm`` the app warms ``runtime``
    when it starts (``runtime.warm(answer=True)`` on a thread of its own: every method's models, then one answer
    each), without it (``serve --lazy``) it is ready at once and each method loads on its first question. Requests
    that come before ready are queued and wait for the warm-up. ``GET /methods`` → the
    methods with their settings, the default (``d2rag`` when present, else the first) and the decision block;
    ``POST /answer`` with ``{"question": str}`` or ``{"questions": [str, ...]}`` (+ optional ``method``, ``traces``,
    ``on_ood``) → ``{"bundle", "version", "method", "answers": [RuntimeAnswer.to_dict() without "trace" unless
    traces]}``. The app's scheduler is ``app.state.scheduler`` (closed when the app shuts down; :func:`run_server`
    closes it as soon as shutdown begins, which interrupts a running batch), its :class:`OODTally` ``app.state.ood``,
    its warm-up ``app.state.warm_up`` (stopped when the app shuts down).
    """
    if not isinstance(limits, ServeLimits):
        raise ConfigError(f"limits must be a ServeLimits, got {type(limits).__name__}", "serve.limits")
    methods = tuple(runtime.methods)
    if not methods:
        raise ConfigError("the runtime has no methods to serve", "serve")
    default_method = "d2rag" if "d2rag" in methods else methods[0]
    method_type = method_enum(methods)
    request_model = _request_model(limits, methods, method_type)
    answer_body = _typed_answers(method_type)
    fields = tuple(request_model.model_fields)

    ood = OODTally()

    def answer_batch(questions: list[str], key: Any) -> Sequence[Any]:
        if isinstance(key, tuple):  # (method, on_ood): a request that set on_ood is batched with its like only
            answers = runtime.answer_many(questions, key[0], on_ood=key[1])  # type: ignore[call-arg]
        else:
            answers = runtime.answer_many(questions, key)
        ood.add(answers)
        return answers

    scheduler = BatchScheduler(
        answer_batch,
        max_queue=limits.max_queue,
        max_batch_questions=limits.max_batch_questions,
    )
    warm_up = WarmUp((lambda: runtime.warm(answer=True)) if warm else None)
    assets = _docs_assets()
    routes = "GET /health, GET /ready, GET /methods, POST /answer, GET /v1/models, POST /v1/chat/completions" + (
        ", GET /docs, GET /redoc" if assets else ""
    )
    chat_fields = tuple(oai.ChatCompletionRequest.model_fields)
    started = time.time()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        warm_up.start()  # the socket is bound right after: /health answers while the models load
        yield
        warm_up.close()
        scheduler.close()  # waiting requests get 503 instead of hanging until the process exits

    app = FastAPI(
        title=f"workbench — {runtime.name} {runtime.version}",
        version=str(runtime.version),
        description=(
            "Answers questions with an exported workbench bundle. Requests arriving together are answered in one "
            f'batch (at most {limits.max_batch_questions} questions). Errors are `{{"detail": "<one line>"}}`: '
            f"422 invalid request (also a blank question, one over {limits.max_question_chars} characters or "
            f"{limits.max_question_tokens} tokens, more questions than the method can answer within "
            f"{limits.timeout_s:g} s at the fastest rate measured, an unknown method); 413 body over "
            f"{limits.max_body_bytes} bytes; "
            f"503 queue full ({limits.max_queue} questions; see `Retry-After`), shutting down, or `GET /ready` before "
            "the warm-up is done (`GET /health` is liveness); 504 not answered "
            f"within {limits.timeout_s:g} s; 404 unknown path; 405 wrong HTTP method; 500 server bug. The `/v1` routes "
            "answer as an OpenAI chat-completions server, one model per method, with OpenAI's error shape "
            '(`{"error": {"message", "type", "param", "code"}}`; an invalid request is 400).'
        ),
        docs_url=None,  # served below from package files: FastAPI's own pages load their scripts from a CDN
        redoc_url=None,
        openapi_url="/openapi.json",
        lifespan=lifespan,
    )
    app.router.route_class = StrictJSONRoute  # every route below parses its JSON body strictly
    app.state.scheduler = scheduler
    app.state.ood = ood
    app.state.warm_up = warm_up
    app.add_middleware(oai.V1BodySizeLimit, max_bytes=limits.max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def _on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        if oai.is_v1(request.url.path):
            return _v1_error(400, _validation_detail(exc.errors(), chat_fields), param=oai.error_param(exc.errors()))
        return _error(422, _validation_detail(exc.errors(), fields))

    @app.exception_handler(StarletteHTTPException)
    async def _on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        exc = body_refusal(exc)  # the strict JSON parser's 422 (strict_body)
        status, detail = exc.status_code, str(exc.detail)
        path = request.url.path[:200]
        if status == 404 and detail == "Not Found":
            detail = f"no route {request.method} {path} (routes: {routes})"
        elif status == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            detail = f"{request.method} is not allowed on {path}" + (f" (allowed: {allowed})" if allowed else "")
        elif status == 400:
            # FastAPI's answer to a body it could not read: an invalid request like any other
            status, detail = 422, "malformed JSON body: it could not be read"
        shape = _v1_error if oai.is_v1(request.url.path) else _error
        return shape(status, detail, headers=exc.headers if status == exc.status_code else None)

    @app.exception_handler(Exception)
    async def _on_bug(request: Request, exc: Exception) -> JSONResponse:
        # A bug outside answering (those are caught in the endpoint). Starlette re-raises after this answer, so the
        # server may log it again; logging here keeps the traceback whatever the server.
        logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        shape = _v1_error if oai.is_v1(request.url.path) else _error
        return shape(500, f"internal server error ({type(exc).__name__}); see the server log")

    errors = {
        413: {"model": ErrorBody, "description": "Body over the size limit"},
        422: {
            "model": ErrorBody,
            "description": "Invalid request: blank or over-long question (characters or tokens), unknown method, "
            "or a question the runtime refused",
        },
        500: {"model": ErrorBody, "description": "Server bug (logged)"},
        503: {
            "model": ErrorBody,
            "description": "Queue full (see the Retry-After header), shutting down, or the external retriever failed",
        },
        504: {"model": ErrorBody, "description": "Not answered within the request deadline"},
    }

    @app.get("/health", response_model=HealthBody, summary="Liveness, the bundle served and the answer queue")
    async def health() -> dict[str, Any]:
        # async and never waits on the model: the scheduler's lock is only held for queue bookkeeping
        return {
            "status": "ok",
            "ready": warm_up.ready,
            "bundle": runtime.name,
            "version": runtime.version,
            "methods": list(methods),
            "queue": scheduler.stats(),
            "ood": ood.counts(),
            # on a thread: asking the engine takes a network round trip (one try, bounded by its timeout)
            "retriever": await anyio.to_thread.run_sync(runtime.retriever_status),
        }

    @app.get(
        "/ready",
        response_model=ReadyBody,
        responses={503: {"model": ErrorBody, "description": "Not warm yet (see the Retry-After header)"}},
        summary="Readiness: 200 once every method's models are loaded and each has answered once",
    )
    async def ready() -> Response:
        status = warm_up.status()
        if status["ready"]:
            return JSONResponse({"status": "ready", "warm_up_s": round(status["seconds"], 3)})
        if status["state"] == "failed":
            return _error(503, "not ready: the warm-up failed (see the server log); the server is stopping")
        return _error(
            503,
            f"not ready: warming up for {status['seconds']:.0f} s (loading every method's models and answering one "
            "warm-up question with each)",
            {"Retry-After": "1"},
        )

    @app.get("/methods", response_model=MethodsBody, summary="The bundle's methods, settings and decision rule")
    async def list_methods() -> JSONResponse:
        info = runtime.info()
        settings = info.get("methods") or {}
        body = {
            "bundle": runtime.name,
            "version": runtime.version,
            "default": default_method,
            "methods": [
                {"name": m, "default": m == default_method, "options": settings.get(m, runtime.method_options.get(m))}
                for m in methods
            ],
            "decision": info.get("decision"),
        }
        return JSONResponse(_json_safe(body))

    async def wait_for(job: Job, request: Request, deadline: float, error: ErrorFn) -> Response | list[Any]:
        """The job's answers, or the right refusal (made by ``error``): 504 past the deadline, nothing (499) when the
        client left (either way the job is cancelled, a running batch interrupted when it was the last waiting)."""
        try:
            return await job_answers(scheduler, job, request, deadline)
        except ClientGone:
            return Response(status_code=CLIENT_CLOSED)
        except NotInTime:
            return error(504, f"not answered within the {limits.timeout_s:g} s deadline")
        except DeadlineExpired:
            return error(504, f"not answered within the {limits.timeout_s:g} s deadline (dropped while queued)")
        except SchedulerClosed as exc:
            return error(503, str(exc))
        except WorkbenchError as exc:
            from workbench.backends.retrieval_engines import EngineError

            # the bundle's engine failed (on_failure: error): the service is unavailable, the request was fine
            return error(503 if isinstance(exc, EngineError) else 422, str(exc))
        except Exception:
            path = request.url.path
            logger.exception("POST %s failed (%d question(s), method %s)", path, len(job.questions), job.method)
            return error(500, "internal server error while answering; see the server log")

    async def answered(
        questions: list[str],
        labels: list[str],
        method: str,
        request: Request,
        deadline: float,
        error: ErrorFn,
        on_ood: str | None = None,
    ) -> Response | list[Any]:
        """Answers to valid ``questions`` (``labels`` name them in errors) once their tokens are counted against the
        limit and the scheduler has answered them; else the refusal made by ``error`` (422, 503, 504, 500)."""
        try:
            # in a thread: with --lazy the first call loads the generator's tokenizer (and the models)
            counts = await anyio.to_thread.run_sync(runtime.count_tokens, questions)
        except Exception:
            logger.exception("counting the tokens of %d question(s) failed", len(questions))
            return error(500, "internal server error while counting tokens; see the server log")
        too_long = _token_detail(labels, counts, limits.max_question_tokens)
        if too_long:
            return error(422, too_long)
        key = method if on_ood is None else (method, on_ood)
        too_much = _work_detail(len(questions), method, scheduler.fastest_seconds_per_question(key), limits.timeout_s)
        if too_much:
            return error(422, too_much)
        try:
            job = scheduler.submit(questions, key, deadline)  # type: ignore[arg-type]
        except QueueFull as exc:
            return error(503, str(exc), {"Retry-After": str(exc.retry_after_s)})
        except SchedulerClosed as exc:
            return error(503, str(exc))
        return await wait_for(job, request, deadline, error)

    @app.post("/answer", response_model=answer_body, responses=errors, summary="Answer one question or a batch")
    async def answer(body: request_model, request: Request) -> Response:  # type: ignore[valid-type]
        deadline = time.monotonic() + limits.timeout_s
        method = body.method.value if body.method is not None else default_method
        if method not in methods:
            return _error(422, f"unknown method {method!r}; this bundle has: {', '.join(methods)}")
        single = body.question is not None
        questions = [body.question] if single else list(body.questions)
        labels = ["question"] if single else [f"questions[{i}]" for i in range(len(questions))]
        outcome = await answered(questions, labels, method, request, deadline, _error, body.on_ood)
        if not isinstance(outcome, list):
            return outcome
        out = [_answer_record(item, body.traces) for item in outcome]
        payload = {"bundle": runtime.name, "version": runtime.version, "method": method, "answers": out}
        return JSONResponse(_json_safe(payload))

    def model_cards() -> dict[str, dict[str, Any]]:
        created = oai.created_at(runtime.info().get("created"), started)  # the bundle's export time
        return {m: oai.model_card(m, owned_by=runtime.name, created=created) for m in methods}

    @app.get("/v1/models", response_model=oai.ModelList, summary="OpenAI: one model per method of the bundle")
    async def v1_models() -> dict[str, Any]:
        return {"object": "list", "data": list(model_cards().values())}

    @app.get("/v1/models/{model}", response_model=oai.ModelCard, responses=oai.RESPONSES, summary="OpenAI: one model")
    async def v1_model(model: str) -> Response:
        card = model_cards().get(model)
        if card is None:
            refusal = oai.unknown_model(model, methods)
            return _v1_error(404, refusal.message, param=refusal.param, code=refusal.code)
        return JSONResponse(card)

    @app.post(
        "/v1/chat/completions",
        response_model=oai.ChatCompletion,
        responses=oai.RESPONSES,
        summary="OpenAI: answer the last user message with the method named by `model`",
    )
    async def chat_completions(body: oai.ChatCompletionRequest, request: Request) -> Response:
        deadline = time.monotonic() + limits.timeout_s
        try:
            index, question = oai.chat_question(body, methods, limits.max_question_chars, is_blank)
        except oai.ChatError as exc:
            return _v1_error(exc.status, exc.message, param=exc.param, code=exc.code)
        where = f"messages[{index}].content"

        def chat_error(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
            return _v1_error(status, detail, headers, param=where if status == 422 else None)  # 422: the question

        outcome = await answered([question], [where], body.model, request, deadline, chat_error)
        if not isinstance(outcome, list):
            return outcome
        record = _answer_record(outcome[0], traces=False)
        return JSONResponse(_json_safe(oai.completion_body(record, bundle=runtime.name, version=runtime.version)))

    if assets is None:
        logger.warning("no Swagger UI / ReDoc assets (the fastapi-offline package): /docs and /redoc are off")
    else:
        app.mount(DOCS_ASSETS, StaticFiles(directory=assets), name="docs-assets")
        page_title = html.escape(app.title)

        @app.get("/docs", include_in_schema=False)
        async def swagger_ui() -> HTMLResponse:
            return get_swagger_ui_html(
                openapi_url="/openapi.json",
                title=f"{page_title} — docs",
                swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
                swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
                swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
                # no online validator badge: it would call a validator service on the internet
                swagger_ui_parameters={"validatorUrl": None},
            )

        @app.get("/redoc", include_in_schema=False)
        async def redoc() -> HTMLResponse:
            return get_redoc_html(
                openapi_url="/openapi.json",
                title=f"{page_title} — ReDoc",
                redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
                redoc_favicon_url=f"{DOCS_ASSETS}/favicon.png",
                with_google_fonts=False,  # fonts from the internet: the page uses the browser's own
            )

    return app


def run_server(
    runtime: ServableRuntime,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: ServeLimits = _DEFAULT_LIMITS,
    log_level: str = "info",
    warm: bool = True,
) -> None:
    """Serve ``runtime`` with uvicorn until interrupted (Ctrl-C, SIGTERM: within seconds, a running batch or the
    warm-up interrupted); binds to localhost unless ``host`` says otherwise.

    Prints one line with the API's URL, its docs URL and its readiness URL once the socket is bound (the real port
    when ``port`` is 0). With ``warm`` the runtime is warmed from then on (:func:`create_app`): ``GET /health``
    answers at once, ``GET /ready`` once warm. A warm-up that fails stops the server, and its exception is raised
    here (a :class:`~workbench.core.errors.WorkbenchError` for a model that cannot load: the CLI's one line). The API
    has no authentication: bind another interface only behind something that provides it.
    """
    from workbench.serve.uvicorn_run import run_uvicorn

    app = create_app(runtime, limits, warm=warm)
    warm_up: WarmUp = app.state.warm_up

    def shutdown() -> None:
        warm_up.close()  # a warm-up still running stops at the model's next forward
        app.state.scheduler.close()

    def stop_on_failure(server: Any) -> None:
        warm_up.on_failure = lambda exc: setattr(server, "should_exit", True)

    run_uvicorn(
        app,
        host=host,
        port=port,
        log_level=log_level,
        announce=lambda url: (
            f"workbench serve: {runtime.name} {runtime.version} at {url} (docs: {url}/docs, readiness: {url}/ready)"
        ),
        on_shutdown=shutdown,
        on_server=stop_on_failure,
    )
    if warm_up.failure is not None:
        raise warm_up.failure
