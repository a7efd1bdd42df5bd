"""The JSON HTTP API over a bundle's :class:`~workbench.runtime.Runtime`: FastAPI app and uvicorn runner.

Routes: ``GET /health``, ``GET /methods``, ``POST /answer`` (one question or a batch), ``/docs`` and
``/openapi.json``. Every error body is ``{"detail": "<one line>"}``: 422 for a request that fails validation (or a
:class:`~workbench.core.errors.WorkbenchError` raised while answering), 413 for a body over the size limit, 404 for an
unknown path, 500 only for a server bug (logged with its traceback).

Answering is synchronous CPU work: it runs in a worker thread, one request at a time (the runtime serialises answers
anyway; the gate keeps waiting requests from each holding a thread), so ``/health`` answers while a batch runs.

This module imports FastAPI, Starlette and pydantic only; uvicorn is imported by :func:`run_server` alone.
"""

# No ``from __future__ import annotations``: the request model is built per app (its limits vary), and FastAPI and
# pydantic must see its annotations as objects, not as strings naming function locals.

import functools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from workbench.core.errors import ConfigError, WorkbenchError
from workbench.serve.body_limit import BodySizeLimit

logger = logging.getLogger("workbench.serve")

_MAX_DETAIL_CHARS = 500


@dataclass(frozen=True)
class ServeLimits:
    """Request limits of the API; each must be an integer >= 1 (else a one-line :class:`ConfigError`).

    ``max_batch``: most questions in one ``POST /answer``; ``max_body_bytes``: largest request body (413 beyond);
    ``max_question_chars``: longest question, in characters.
    """

    max_batch: int = 32
    max_body_bytes: int = 65536
    max_question_chars: int = 2000

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_body_bytes", "max_question_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}", f"serve.{name}")


_DEFAULT_LIMITS = ServeLimits()


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
        """Answers (objects with ``to_dict()``), one per question, in order."""
        ...


class ErrorBody(BaseModel):
    """Every error response: one line saying what is wrong."""

    detail: str


class HealthBody(BaseModel):
    """``GET /health``."""

    status: str = "ok"
    bundle: str
    version: str
    methods: list[str]


class MethodInfo(BaseModel):
    """One method of the bundle with its settings."""

    name: str
    default: bool
    options: dict[str, Any]


class MethodsBody(BaseModel):
    """``GET /methods``: the methods, the default one, and the bundle's retrieval-decision block (or null)."""

    bundle: str
    version: str
    default: str
    methods: list[MethodInfo]
    decision: dict[str, Any] | None


class AnswerBody(BaseModel):
    """``POST /answer``: one answer per question, in order (see ``RuntimeAnswer``; ``trace`` only when asked)."""

    bundle: str
    version: str
    method: str
    answers: list[dict[str, Any]]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


def _request_model(limits: ServeLimits, methods: Sequence[str]) -> type[BaseModel]:
    """The ``POST /answer`` body, its constraints taken from ``limits``."""
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
        method: str | None = Field(None, min_length=1, description=f"One of: {known}.")
        traces: bool = Field(False, description="Include each answer's full step-by-step trace.")

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


def create_app(runtime: ServableRuntime, limits: ServeLimits = _DEFAULT_LIMITS) -> FastAPI:
    """A FastAPI app serving ``runtime`` under ``limits`` (see the module docstring for routes and status codes).

    ``GET /health`` → ``{"status": "ok", "bundle", "version", "methods"}``; ``GET /methods`` → the methods with their
    settings, the default (``d2rag`` when present, else the first) and the decision block; ``POST /answer`` with
    ``{"question": str}`` or ``{"questions": [str, ...]}`` (+ optional ``method``, ``traces``) → ``{"bundle",
    "version", "method", "answers": [RuntimeAnswer.to_dict() without "trace" unless traces]}``.
    """
    if not isinstance(limits, ServeLimits):
        raise ConfigError(f"limits must be a ServeLimits, got {type(limits).__name__}", "serve.limits")
    methods = tuple(runtime.methods)
    if not methods:
        raise ConfigError("the runtime has no methods to serve", "serve")
    default_method = "d2rag" if "d2rag" in methods else methods[0]
    request_model = _request_model(limits, methods)
    fields = tuple(request_model.model_fields)
    # One answering call at a time: the runtime's lock would serialise them anyway, and waiting here (not in a
    # worker thread) leaves the thread pool free.
    gate = anyio.CapacityLimiter(1)

    app = FastAPI(
        title=f"workbench — {runtime.name} {runtime.version}",
        version=str(runtime.version),
        description=(
            'Answers questions with an exported workbench bundle. Errors are `{"detail": "<one line>"}`: '
            f"422 invalid request, 413 body over {limits.max_body_bytes} bytes, 404 unknown path, 500 server bug."
        ),
        docs_url="/docs",
        openapi_url="/openapi.json",
        redoc_url=None,
    )
    app.add_middleware(BodySizeLimit, max_bytes=limits.max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def _on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, _validation_detail(exc.errors(), fields))

    @app.exception_handler(StarletteHTTPException)
    async def _on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = str(exc.detail)
        path = request.url.path[:200]
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no route {request.method} {path} (routes: GET /health, GET /methods, POST /answer, GET /docs)"
        elif exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            detail = f"{request.method} is not allowed on {path}" + (f" (allowed: {allowed})" if allowed else "")
        return _error(exc.status_code, detail, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _on_bug(request: Request, exc: Exception) -> JSONResponse:
        # A bug outside answering (those are caught in the endpoint). Starlette re-raises after this answer, so the
        # server may log it again; logging here keeps the traceback whatever the server.
        logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return _error(500, f"internal server error ({type(exc).__name__}); see the server log")

    errors = {
        413: {"model": ErrorBody, "description": "Body over the size limit"},
        422: {"model": ErrorBody, "description": "Invalid request, unknown method, or a question the runtime refused"},
        500: {"model": ErrorBody, "description": "Server bug (logged)"},
    }

    @app.get("/health", response_model=HealthBody, summary="Liveness and the bundle served")
    async def health() -> dict[str, Any]:
        # async and lock-free: answers at once even while a batch is being answered in a worker thread
        return {"status": "ok", "bundle": runtime.name, "version": runtime.version, "methods": list(methods)}

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

    @app.post("/answer", response_model=AnswerBody, responses=errors, summary="Answer one question or a batch")
    async def answer(body: request_model) -> JSONResponse:  # type: ignore[valid-type]
        method = body.method or default_method
        if method not in methods:
            return _error(422, f"unknown method {method!r}; this bundle has: {', '.join(methods)}")
        questions = [body.question] if body.question is not None else list(body.questions)
        call = functools.partial(runtime.answer_many, questions, method)
        try:
            answers = await anyio.to_thread.run_sync(call, limiter=gate)
        except WorkbenchError as exc:
            return _error(422, str(exc))
        except Exception:
            logger.exception("POST /answer failed (%d question(s), method %s)", len(questions), method)
            return _error(500, "internal server error while answering; see the server log")
        out = []
        for item in answers:
            record = item.to_dict()
            if not body.traces:
                record.pop("trace", None)
            out.append(record)
        payload = {"bundle": runtime.name, "version": runtime.version, "method": method, "answers": out}
        return JSONResponse(_json_safe(payload))

    return app


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def run_server(
    runtime: ServableRuntime,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: ServeLimits = _DEFAULT_LIMITS,
    log_level: str = "info",
) -> None:
    """Serve ``runtime`` with uvicorn until interrupted (Ctrl-C); binds to localhost unless ``host`` says otherwise.

    Prints one line with the API's URL and its docs URL once the socket is bound (the real port when ``port`` is 0).
    The API has no authentication: bind another interface only behind something that provides it.
    """
    import uvicorn

    app = create_app(runtime, limits)

    class _Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                bound = port
                servers = getattr(self, "servers", None) or []
                if servers and servers[0].sockets:
                    bound = servers[0].sockets[0].getsockname()[1]
                url = _url(host, bound)
                print(f"workbench serve: {runtime.name} {runtime.version} at {url} (docs: {url}/docs)", flush=True)

    if host not in ("127.0.0.1", "localhost", "::1"):
        logger.warning("binding %s: the API is reachable from other machines and has no authentication", host)
    _Server(uvicorn.Config(app, host=host, port=port, log_level=log_level)).run()
