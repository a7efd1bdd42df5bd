"""The bundle API's own routes: ``GET /health`` (liveness), ``GET /ready`` (readiness), ``GET /methods`` and
``POST /answer`` (one question or a batch)."""

# No ``from __future__ import annotations``: FastAPI and pydantic read the annotations as objects.

import time
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import (
    BaseModel,
)

from workbench.serve.answer_schema import ErrorBody, HealthBody, MethodsBody, ReadyBody
from workbench.serve.answering import ServeContext, answer_record, json_safe
from workbench.serve.http_errors import error_response


def add_answer_routes(
    app: FastAPI, ctx: ServeContext, request_model: type[BaseModel], answer_body: type[BaseModel]
) -> None:
    """Add ``GET /health``, ``GET /ready``, ``GET /methods`` and ``POST /answer`` to ``app`` (see
    :func:`workbench.serve.app.create_app`); ``request_model`` / ``answer_body``: the ``POST /answer`` request and
    response models made for this app's limits and methods."""

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
            "ready": ctx.warm_up.ready,
            "bundle": ctx.runtime.name,
            "version": ctx.runtime.version,
            "methods": list(ctx.methods),
            "queue": ctx.scheduler.stats(),
            "ood": ctx.ood.counts(),
            # on a thread: asking the engine takes a network round trip (one try, bounded by its timeout)
            "retriever": await anyio.to_thread.run_sync(ctx.runtime.retriever_status),
        }

    @app.get(
        "/ready",
        response_model=ReadyBody,
        responses={503: {"model": ErrorBody, "description": "Not warm yet (see the Retry-After header)"}},
        summary="Readiness: 200 once every method's models are loaded and each has answered once",
    )
    async def ready() -> Response:
        status = ctx.warm_up.status()
        if status["ready"]:
            return JSONResponse({"status": "ready", "warm_up_s": round(status["seconds"], 3)})
        if status["state"] == "failed":
            return error_response(503, "not ready: the warm-up failed (see the server log); the server is stopping")
        return error_response(
            503,
            f"not ready: warming up for {status['seconds']:.0f} s (loading every method's models and answering one "
            "warm-up question with each)",
            {"Retry-After": "1"},
        )

    @app.get("/methods", response_model=MethodsBody, summary="The bundle's methods, settings and decision rule")
    async def list_methods() -> JSONResponse:
        info = ctx.runtime.info()
        settings = info.get("methods") or {}
        body = {
            "bundle": ctx.runtime.name,
            "version": ctx.runtime.version,
            "default": ctx.default_method,
            "methods": [
                {
                    "name": m,
                    "default": m == ctx.default_method,
                    "options": settings.get(m, ctx.runtime.method_options.get(m)),
                }
                for m in ctx.methods
            ],
            "decision": info.get("decision"),
        }
        return JSONResponse(json_safe(body))

    @app.post("/answer", response_model=answer_body, responses=errors, summary="Answer one question or a batch")
    async def answer(body: request_model, request: Request) -> Response:  # type: ignore[valid-type]
        deadline = time.monotonic() + ctx.limits.timeout_s
        method = body.method.value if body.method is not None else ctx.default_method
        if method not in ctx.methods:
            return error_response(422, f"unknown method {method!r}; this bundle has: {', '.join(ctx.methods)}")
        single = body.question is not None
        questions = [body.question] if single else list(body.questions)
        labels = ["question"] if single else [f"questions[{i}]" for i in range(len(questions))]
        outcome = await ctx.answered(questions, labels, method, request, deadline, error_response, body.on_ood)
        if not isinstance(outcome, list):
            return outcome
        out = [answer_record(item, body.traces) for item in outcome]
        payload = {"bundle": ctx.runtime.name, "version": ctx.runtime.version, "method": method, "answers": out}
        return JSONResponse(json_safe(payload))
