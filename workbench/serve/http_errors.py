"""Error responses of the bundle API: ``{"detail": "<one line>"}`` (OpenAI's shape on ``/v1`` paths), pydantic's
validation errors as one line, and the app's handlers for invalid requests, framework HTTP errors and bugs."""

# No ``from __future__ import annotations``: FastAPI and pydantic read the annotations as objects.

import logging
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

import workbench.serve.openai_bundle as oai
from workbench.serve.strict_body import body_refusal

logger = logging.getLogger("workbench.serve")

MAX_DETAIL_CHARS = 500


ErrorFn = Callable[..., JSONResponse]
"""Makes an error response: ``(status, detail, headers=None)``; :func:`error_response`, or on ``/v1`` OpenAI's shape."""


def one_line_detail(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_DETAIL_CHARS else line[: MAX_DETAIL_CHARS - 1] + "…"


def error_response(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": one_line_detail(detail)}, status_code=status, headers=headers)


def v1_error_response(
    status: int,
    detail: str,
    headers: dict[str, str] | None = None,
    *,
    param: str | None = None,
    code: str | None = None,
) -> JSONResponse:
    return oai.error_response(status, one_line_detail(detail), headers, param=param, code=code)


def validation_detail(errors: Sequence[dict[str, Any]], fields: Sequence[str]) -> str:
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


def add_error_handlers(app: FastAPI, fields: Sequence[str], chat_fields: Sequence[str], routes: str) -> None:
    """Install ``app``'s error handlers: an invalid request is a 422 naming what is wrong (on ``/v1`` paths OpenAI's
    400); the framework's HTTP errors keep their status (a 404 lists ``routes``, a 405 the allowed methods, a body
    that could not be read is a 422); any other exception is a 500, logged with its traceback, its text never sent.
    ``fields`` / ``chat_fields``: the fields ``POST /answer`` / ``POST /v1/chat/completions`` allow."""

    @app.exception_handler(RequestValidationError)
    async def _on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        if oai.is_v1(request.url.path):
            return v1_error_response(
                400, validation_detail(exc.errors(), chat_fields), param=oai.error_param(exc.errors())
            )
        return error_response(422, validation_detail(exc.errors(), fields))

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
        shape = v1_error_response if oai.is_v1(request.url.path) else error_response
        return shape(status, detail, headers=exc.headers if status == exc.status_code else None)

    @app.exception_handler(Exception)
    async def _on_bug(request: Request, exc: Exception) -> JSONResponse:
        # A bug outside answering (those are caught in the endpoint). Starlette re-raises after this answer, so the
        # server may log it again; logging here keeps the traceback whatever the server.
        logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        shape = v1_error_response if oai.is_v1(request.url.path) else error_response
        return shape(500, f"internal server error ({type(exc).__name__}); see the server log")
