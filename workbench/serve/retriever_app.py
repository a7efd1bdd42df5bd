"""``workbench serve-retriever``: any retriever over the ``POST /retrieve`` shape that FlashRAG / Search-R1 retriever
servers speak (FastAPI + uvicorn), so collection shards on many machines, deployed bundles and FlashRAG / Search-R1
tools share one retriever.

Routes:

* ``POST /retrieve`` with ``{"queries": [str, ...], "topk": int | null, "return_scores": bool}`` (``topk`` null or 0:
  the server's default, as Search-R1's server does; ``return_scores`` false by default) → ``{"result": [hits of
  each query]}``, each hit ``{"document": {...}, "score": float}`` best first, or the bare document without
  ``return_scores``. A document is ``{"id", "contents", "title", "text", "doc_id"}``: ``id`` the passage's chunk id,
  ``contents`` FlashRAG's one field (the title in double quotes on the first line, then the text: what Search-R1's
  client splits), and the separate fields :mod:`workbench.backends.retrieval_http` reads first;
* ``GET /health`` → ``{"status": "ok", "service": "workbench serve-retriever", "backend", "channels", "index",
  "corpus_fingerprint", "index_fingerprint", "passages", "requests", "queries", "failures", "last_error",
  "limits"}`` (``requests`` / ``queries``: answered since start; ``failures`` / ``last_error``: the backing engine's).

Errors are ``{"detail": "<one line>"}``: 422 an invalid request (not strict JSON — also a repeated key, NaN, nesting
past 64 levels —, an unknown field, a wrong type, more than ``max_queries`` queries, a ``topk`` over ``max_topk`` or
negative, a query over ``max_query_chars`` characters or not Unicode text), 413 a body over ``max_body_bytes``, 503
the backing engine failed (its one-line error, URI without credentials; the client may retry), more than
``max_waiting`` requests already wait, or the server is shutting down, 404 / 405 a wrong route or method, 500 a bug
(logged). Searches run on worker threads, ``max_concurrency`` requests at a time; SIGTERM stops the server within
seconds (:mod:`workbench.serve.uvicorn_run`).

This module imports FastAPI, Starlette, pydantic and anyio; the retriever is built by the caller
(:func:`workbench.stages.retriever_service.recipe_retriever` for a recipe) and uvicorn imported when a server starts.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations as objects.

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict

from workbench.backends.passage_table import passages_of
from workbench.backends.retrieval_engines import ExternalRetriever
from workbench.backends.retrieval_http import SERVICE, hits_as_answer, served_document
from workbench.core.errors import WorkbenchError
from workbench.serve.body_limit import BodySizeLimit
from workbench.serve.field_checks import has_lone_surrogate, shown_int
from workbench.serve.http_errors import error_response, validation_detail
from workbench.serve.strict_body import StrictJSONRoute, install_refusal_handlers
from workbench.serve.uvicorn_run import ServerThread, run_uvicorn

logger = logging.getLogger("workbench.serve")

ROUTES = "POST /retrieve, GET /health"


@dataclass(frozen=True)
class RetrieverServeLimits:
    """Limits of ``serve-retriever``; each must be an integer >= 1 (a ``ValueError`` otherwise).

    ``max_queries`` queries per request, ``max_topk`` hits per query, ``default_topk`` when a request gives none
    (null or 0), ``max_query_chars`` characters per query (422 beyond each); ``max_body_bytes`` (413 beyond);
    ``max_concurrency`` requests searched at once (1: a retriever need not be safe on several threads; an engine's
    retriever already runs one request's queries concurrently); ``max_waiting`` requests waiting (503 beyond)."""

    max_queries: int = 256
    max_topk: int = 100
    default_topk: int = 3
    max_query_chars: int = 2000
    max_body_bytes: int = 1 << 20
    max_concurrency: int = 1
    max_waiting: int = 256

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.default_topk > self.max_topk:
            raise ValueError(f"default_topk ({self.default_topk}) exceeds max_topk ({self.max_topk})")


@dataclass(frozen=True)
class ServedIndex:
    """What ``serve-retriever`` serves: the ``retriever`` (any :class:`~workbench.backends.retrievers.Retriever`),
    the corpus it returns passages of (a Dataset or mapping of columns ``chunk_id``, ``doc_id``, ``title``,
    ``text``, row i the passage at corpus index i), the ``backend`` name, the ``channels`` it searches, and the
    engine's ``index`` name (None in-process)."""

    retriever: Any
    corpus: Any
    backend: str
    channels: tuple[str, ...]
    index: str | None = None


class RetrieveRequest(BaseModel):
    """The ``POST /retrieve`` body (strict types, no other field)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    queries: list[str]
    topk: int | None = None
    return_scores: bool = False


class _Tally:
    """What ``GET /health`` counts (updated under a lock: searches run on several threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = self.queries = self.failures = self.waiting = 0
        self.last_error: str | None = None
        self.closing = False


def _documents(retriever: Any) -> int | None:
    """How many passages ``retriever`` searches: an engine's count (one request; None when it fails or cannot say),
    an in-process index's corpus size."""
    if isinstance(retriever, ExternalRetriever):
        try:
            return retriever.count()
        except WorkbenchError:
            return None
    corpus = getattr(retriever, "corpus", None)
    return len(corpus) if corpus is not None else None


def create_retriever_app(served: ServedIndex, limits: RetrieverServeLimits | None = None) -> FastAPI:
    """The FastAPI app serving ``served`` under ``limits`` (see the module docstring). ``app.state.close()`` makes
    every later request a 503 (called when shutdown begins)."""
    limits = limits or RetrieverServeLimits()
    corpus = served.corpus
    retriever = served.retriever
    # an engine's retriever grows its own table with the passages it returns that the corpus lacks: read from that
    table = passages_of(retriever, corpus)
    live = table is not corpus  # a PassageTable's columns are live lists; a Dataset's are read once
    columns = {c: table[c] if live else list(corpus[c]) for c in ("chunk_id", "doc_id", "title", "text")}
    fields = tuple(RetrieveRequest.model_fields)
    tally = _Tally()
    limiter = anyio.CapacityLimiter(limits.max_concurrency)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        tally.closing = True

    app = FastAPI(
        title=f"workbench serve-retriever — {served.backend}",
        description="A retriever over the POST /retrieve shape of FlashRAG / Search-R1 retriever servers "
        "(docs/retrieval.md).",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.router.route_class = StrictJSONRoute  # every route below parses its JSON body strictly
    app.add_middleware(BodySizeLimit, max_bytes=limits.max_body_bytes)

    def close() -> None:
        tally.closing = True

    app.state.close = close

    install_refusal_handlers(
        app,
        routes=ROUTES,
        error=error_response,
        on_invalid=lambda errors: error_response(422, validation_detail(errors, fields)),
        logger=logger,
    )

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "service": SERVICE,
            "backend": served.backend,
            "channels": list(served.channels),
            "index": served.index,
            "corpus_fingerprint": getattr(getattr(retriever, "corpus", None), "fingerprint", None),
            "index_fingerprint": getattr(retriever, "fingerprint", None),
            "passages": len(columns["chunk_id"]),
            "documents": await anyio.to_thread.run_sync(_documents, retriever),
            "requests": tally.requests,
            "queries": tally.queries,
            "failures": tally.failures,
            "last_error": tally.last_error,
            "limits": asdict(limits),
        }

    def search(queries: list[str], k: int) -> list[list[tuple[dict[str, str], float]]]:
        results = retriever.search(queries, k)
        return [
            [
                (served_document(*(str(columns[c][int(i)]) for c in ("chunk_id", "title", "text", "doc_id"))), s)
                for i, s in zip(result.indices, result.scores, strict=True)
            ]
            for result in results
        ]

    @app.post("/retrieve")
    async def retrieve(body: RetrieveRequest) -> Response:
        refusal = _refusal(body, limits)
        if refusal is not None:
            return error_response(422, refusal)
        if tally.closing:
            return error_response(503, "shutting down")
        with tally.lock:
            if tally.waiting >= limits.max_waiting:
                return error_response(503, f"{tally.waiting} requests are waiting", headers={"Retry-After": "1"})
            tally.waiting += 1
        try:
            hits = await anyio.to_thread.run_sync(
                search, body.queries, body.topk or limits.default_topk, limiter=limiter
            )
        except WorkbenchError as exc:  # the engine (or a served embedder) failed: one line, URI without credentials
            with tally.lock:
                tally.failures += 1
                tally.last_error = str(exc)
            return error_response(503, f"the retriever failed: {exc}")
        finally:
            with tally.lock:
                tally.waiting -= 1
        with tally.lock:
            tally.requests += 1
            tally.queries += len(body.queries)
        return JSONResponse(hits_as_answer(hits, body.return_scores))

    return app


def _refusal(body: RetrieveRequest, limits: RetrieverServeLimits) -> str | None:
    """Why ``body`` is refused (one line, never quoting a query), or None."""
    if len(body.queries) > limits.max_queries:
        return f"queries: {len(body.queries)} queries, at most {limits.max_queries} per request"
    if body.topk is not None and not 0 <= body.topk <= limits.max_topk:
        return f"topk: {shown_int(body.topk)} is outside 0..{limits.max_topk} (0 or null: {limits.default_topk})"
    for i, query in enumerate(body.queries):
        if len(query) > limits.max_query_chars:
            return f"queries[{i}]: {len(query)} characters, at most {limits.max_query_chars}"
        if has_lone_surrogate(query):
            return f"queries[{i}]: not Unicode text (a lone surrogate)"
    return None


class RetrieverServer(ServerThread):
    """A ``serve-retriever`` running in a background thread (:func:`start_in_thread`): ``url`` is its root
    (``http://127.0.0.1:PORT``), ``retrieve_url`` its ``POST /retrieve``; :meth:`stop` shuts it down (also a
    context manager)."""

    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        super().__init__(app, host=host, port=port, name="serve-retriever", on_shutdown=app.state.close)
        self.retrieve_url = ""

    def start(self, timeout: float) -> "RetrieverServer":
        """Start serving; returns once the server accepts connections (a RuntimeError after ``timeout`` s)."""
        super().start(timeout)
        self.retrieve_url = f"{self.url}/retrieve"
        return self


def start_in_thread(
    served: ServedIndex,
    *,
    limits: RetrieverServeLimits | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    ready_timeout: float = 30.0,
) -> RetrieverServer:
    """Serve ``served`` in a background thread on ``host`` (port 0: a free one); returns the running
    :class:`RetrieverServer`."""
    return RetrieverServer(create_retriever_app(served, limits), host, port).start(ready_timeout)


def run_retriever_server(
    served: ServedIndex,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: RetrieverServeLimits | None = None,
    log_level: str = "info",
    announce: Callable[[str], str] | None = None,
) -> None:
    """Serve ``served`` with uvicorn until interrupted (Ctrl-C, SIGTERM: within seconds); prints one line with the
    ``POST /retrieve`` URL once bound. No authentication: bind another interface than localhost only behind
    something that provides it."""

    app = create_retriever_app(served, limits)
    run_uvicorn(
        app,
        host=host,
        port=port,
        log_level=log_level,
        announce=announce or (lambda url: f"workbench serve-retriever: {served.backend} at {url}/retrieve"),
        on_shutdown=app.state.close,
    )
