"""The JSON HTTP API over a bundle's :class:`~workbench.runtime.Runtime`: FastAPI app and uvicorn runner.

Routes: ``GET /health`` (liveness), ``GET /ready`` (readiness: :mod:`workbench.serve.readiness`), ``GET /methods``,
``POST /answer`` (one question or a batch), ``GET /docs`` (Swagger UI) and
``GET /redoc`` (ReDoc), both from assets shipped in a Python package (``fastapi-offline``), so they work offline, and
``GET /openapi.json``, the OpenAI-compatible ``GET /v1/models`` and ``POST /v1/chat/completions`` (the bundle's
methods as chat models; see :mod:`workbench.serve.openai_bundle`), and drift monitoring: ``GET /metrics``
(Prometheus) and ``GET /drift`` (:mod:`workbench.serve.monitor_routes`, docs/monitoring.md). Every error body is
``{"detail": "<one line>"}`` (on ``/v1`` paths OpenAI's ``{"error": {...}}``, an invalid request 400), one status
code per kind of failure:

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

This module assembles the app; its parts are split by job: :mod:`~workbench.serve.limits` (:class:`ServeLimits`),
:mod:`~workbench.serve.answer_schema` (the request and response models), :mod:`~workbench.serve.http_errors` (error
bodies and handlers), :mod:`~workbench.serve.answering` (counting, queueing and waiting for a request's answers),
:mod:`~workbench.serve.answer_routes` (``/health``, ``/ready``, ``/methods``, ``/answer``),
:mod:`~workbench.serve.chat_routes` (the ``/v1`` routes) and :mod:`~workbench.serve.docs_pages` (``/docs``,
``/redoc``). They import FastAPI, Starlette and pydantic only; uvicorn is imported by :func:`run_server` alone. The app
needs the asyncio event loop (uvicorn's, with or without uvloop).
"""

# No ``from __future__ import annotations``: the request model is built per app (its limits vary), and FastAPI and
# pydantic must see its annotations as objects, not as strings naming function locals.

import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI

import workbench.serve.openai_bundle as oai
from workbench.core.errors import ConfigError
from workbench.serve.answer_routes import add_answer_routes
from workbench.serve.answer_schema import OODTally, method_enum, request_model, typed_answers
from workbench.serve.answering import ServableRuntime, ServeContext
from workbench.serve.chat_routes import add_chat_routes
from workbench.serve.docs_pages import add_docs_pages, docs_assets
from workbench.serve.http_errors import add_error_handlers
from workbench.serve.limits import DEFAULT_LIMITS, ServeLimits
from workbench.serve.monitor_routes import RequestMetrics, ServeMetrics, add_monitor_routes, open_monitor
from workbench.serve.readiness import WarmUp
from workbench.serve.scheduler import BatchScheduler
from workbench.serve.strict_body import StrictJSONRoute
from workbench.serve.uvicorn_run import run_uvicorn

__all__ = ["ServableRuntime", "ServeLimits", "create_app", "run_server"]


def create_app(
    runtime: ServableRuntime,
    limits: ServeLimits = DEFAULT_LIMITS,
    *,
    warm: bool = True,
    answer_log: str | Path | None = None,
) -> FastAPI:
    """A FastAPI app serving ``runtime`` under ``limits`` (see the module docstring for routes and status codes).

    ``GET /health`` (liveness: 200 as soon as the server runs) → ``{"status": "ok", "ready", "bundle", "version",
    "methods", "queue", "ood"}``; ``GET /ready`` (readiness) → 200 ``{"status": "ready", "warm_up_s"}`` once the
    app's :class:`~workbench.serve.readiness.WarmUp` is done, 503 before: with ``warm`` the app warms ``runtime``
    when it starts (``runtime.warm(answer=True)`` on a thread of its own: every method's models, then one answer
    each), without it (``serve --lazy``) it is ready at once and each method loads on its first question. Requests
    that come before ready are queued and wait for the warm-up. ``GET /methods`` → the
    methods with their settings, the default (``default_method``) and the decision block;
    ``POST /answer`` with ``{"question": str}`` or ``{"questions": [str, ...]}`` (+ optional ``method``, ``traces``,
    ``on_ood``) → ``{"bundle", "version", "method", "answers": [RuntimeAnswer.to_dict() without "trace" unless
    traces]}``. The app's scheduler is ``app.state.scheduler`` (closed when the app shuts down; :func:`run_server`
    closes it as soon as shutdown begins, which interrupts a running batch), its :class:`OODTally` ``app.state.ood``,
    its warm-up ``app.state.warm_up`` (stopped when the app shuts down), its drift monitor ``app.state.monitor``
    (every answer goes into its rolling window, and as one record into ``answer_log`` when given: opened here,
    closed when the app shuts down).
    """
    if not isinstance(limits, ServeLimits):
        raise ConfigError(f"limits must be a ServeLimits, got {type(limits).__name__}", "serve.limits")
    methods = tuple(runtime.methods)
    if not methods:
        raise ConfigError("the runtime has no methods to serve", "serve")
    from workbench.methods.registry import default_method  # pulls numpy: `import workbench.serve` stays light

    default = default_method(methods)
    method_type = method_enum(methods)
    answer_request = request_model(limits, methods, method_type)
    answer_body = typed_answers(method_type)
    fields = tuple(answer_request.model_fields)

    ood = OODTally()
    monitor = open_monitor(runtime, answer_log)

    def answer_batch(questions: list[str], key: Any) -> Sequence[Any]:
        if isinstance(key, tuple):  # (method, on_ood): a request that set on_ood is batched with its like only
            answers = runtime.answer_many(questions, key[0], on_ood=key[1])  # type: ignore[call-arg]
        else:
            answers = runtime.answer_many(questions, key)
        ood.add(answers)
        monitor.add(answers)
        return answers

    scheduler = BatchScheduler(
        answer_batch,
        max_queue=limits.max_queue,
        max_batch_questions=limits.max_batch_questions,
    )
    warm_up = WarmUp((lambda: runtime.warm(answer=True)) if warm else None)
    assets = docs_assets()
    routes = (
        "GET /health, GET /ready, GET /methods, POST /answer, GET /v1/models, POST /v1/chat/completions, "
        "GET /metrics, GET /drift" + (", GET /docs, GET /redoc" if assets else "")
    )
    chat_fields = tuple(oai.ChatCompletionRequest.model_fields)
    started = time.time()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        warm_up.start()  # the socket is bound right after: /health answers while the models load
        yield
        warm_up.close()
        scheduler.close()  # waiting requests get 503 instead of hanging until the process exits
        monitor.close()

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
    app.state.monitor = monitor
    metrics = ServeMetrics(monitor, ood)
    app.add_middleware(oai.V1BodySizeLimit, max_bytes=limits.max_body_bytes)
    app.add_middleware(RequestMetrics, metrics=metrics)  # outermost: counts every request, a 413 too

    add_error_handlers(app, fields, chat_fields, routes)
    context = ServeContext(runtime, limits, methods, default, scheduler, warm_up, ood, started)
    add_answer_routes(app, context, answer_request, answer_body)
    add_chat_routes(app, context)
    add_monitor_routes(app, monitor, metrics)
    add_docs_pages(app, assets)
    return app


def run_server(
    runtime: ServableRuntime,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: ServeLimits = DEFAULT_LIMITS,
    log_level: str = "info",
    warm: bool = True,
    answer_log: str | Path | None = None,
) -> None:
    """Serve ``runtime`` with uvicorn until interrupted (Ctrl-C, SIGTERM: within seconds, a running batch or the
    warm-up interrupted); binds to localhost unless ``host`` says otherwise.

    Prints one line with the API's URL, its docs URL and its readiness URL once the socket is bound (the real port
    when ``port`` is 0). With ``warm`` the runtime is warmed from then on (:func:`create_app`): ``GET /health``
    answers at once, ``GET /ready`` once warm. A warm-up that fails stops the server, and its exception is raised
    here (a :class:`~workbench.core.errors.WorkbenchError` for a model that cannot load: the CLI's one line). The API
    has no authentication: bind another interface only behind something that provides it. ``answer_log``: a JSONL
    file each answer's record is appended to (:mod:`workbench.monitoring.answer_log`; ``workbench monitor`` reads it).
    """

    app = create_app(runtime, limits, warm=warm, answer_log=answer_log)
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
