"""Strict JSON request bodies for both servers.

FastAPI parses a body with :func:`json.loads`, which lets a repeated key silently win (``{"question": "a",
"question": "b"}`` answers "b" while a log or a proxy that keeps the first sees "a"), takes ``NaN`` and ``Infinity``,
and turns a deeply nested document or a 5,000-digit number into an exception that is no JSON error (worded as "not
UTF-8 text" before). :class:`StrictJSONRoute` parses with :func:`~workbench.core.strict_json.loads_strict` (the bundle
loader's parser) instead: each of these is a one-line 422 ``malformed JSON body: …``, which each server words as its
other malformed bodies (``serve``: 422 ``{"detail"}``; OpenAI paths: ``{"error"}``, 400 on ``serve``'s, 422 on
``serve-model``'s).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from workbench.core.errors import DataError
from workbench.core.strict_json import loads_strict


def parse_body(body: bytes) -> Any:
    """The JSON value of a request ``body``, parsed strictly; a 422 :class:`HTTPException` ``malformed JSON body:
    <why>`` (one line) otherwise: not UTF-8, not JSON, a duplicate key, NaN / Infinity, nesting deeper than 64
    levels, an integer of more than :data:`~workbench.core.strict_json.MAX_INT_DIGITS` digits."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise HTTPException(422, "malformed JSON body: not UTF-8 text") from None
    try:
        return loads_strict(text, "request body")
    except DataError as exc:
        raise HTTPException(422, f"malformed JSON body: {exc.what.removeprefix('not accepted as JSON: ')}") from None


class StrictJSONRequest(Request):
    """A request whose :meth:`json` is :func:`parse_body`'s strict parse."""

    async def json(self) -> Any:
        """The body's JSON value (parsed once); a 422 :class:`HTTPException` when it is not strict JSON."""
        if not hasattr(self, "_json"):
            self._json = parse_body(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """An API route whose JSON body is parsed strictly (set it as ``app.router.route_class`` before adding routes):
    FastAPI re-raises the parser's :class:`HTTPException` as it is, so the app's handler words it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """FastAPI's handler, given a :class:`StrictJSONRequest` over the same connection."""
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict_handler


def body_refusal(exc: HTTPException) -> HTTPException:
    """The parser's own 422 when FastAPI wrapped it in its 400 ``There was an error parsing the body`` (FastAPI
    versions that do not re-raise it), else ``exc``."""
    cause = exc.__cause__
    return cause if exc.status_code == 400 and isinstance(cause, HTTPException) else exc


def http_refusal(method: str, path: str, exc: HTTPException, routes: str) -> tuple[int, str, dict[str, str] | None]:
    """``(status, one-line message, headers)`` for an :class:`HTTPException` the framework raised on ``method
    path``: the parser's own 422 (:func:`body_refusal`), 404 naming the server's ``routes``, 405 naming the method,
    and FastAPI's 400 for a body it could not read as a 422 like every other malformed body."""
    exc = body_refusal(exc)
    status, message = exc.status_code, str(exc.detail)
    if status == 404 and message == "Not Found":
        message = f"no route {method} {path[:200]} (routes: {routes})"
    elif status == 405:
        message = f"{method} is not allowed on {path[:200]}"
    elif status == 400:  # a body FastAPI could not read
        status, message = 422, "malformed JSON body: it could not be read"
    return status, message, exc.headers if status == exc.status_code else None


def install_refusal_handlers(
    app: Any,
    *,
    routes: str,
    error: Callable[..., Response],
    on_invalid: Callable[[list[Any]], Response],
    logger: Any,
) -> None:
    """Answer every refusal of ``app`` in its own error shape: an invalid body by ``on_invalid(exc.errors())``, the
    framework's HTTP errors by ``error(status, message, headers=...)`` worded by :func:`http_refusal` (404 naming
    ``routes``), and a bug by ``error(500, ...)`` naming only its type, its traceback in ``logger`` (the shared
    handlers of ``serve-model`` and ``serve-retriever``)."""

    async def on_validation(request: Request, exc: RequestValidationError) -> Response:
        return on_invalid(exc.errors())

    async def on_http(request: Request, exc: HTTPException) -> Response:
        status, message, headers = http_refusal(request.method, request.url.path, exc, routes)
        return error(status, message, headers=headers)

    async def on_bug(request: Request, exc: Exception) -> Response:
        logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return error(500, f"internal server error ({type(exc).__name__}); see the server log")

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(Exception, on_bug)
