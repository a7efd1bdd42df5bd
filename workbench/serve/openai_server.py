"""``workbench serve-model``: an OpenAI-compatible server over the in-process generator (FastAPI + uvicorn).

The reference the served backend (:mod:`workbench.backends.served`) is tested against: its numbers are the in-process
:class:`~workbench.backends.generator.Generator`'s (docs/served-models.md is the wire contract). Routes:

* ``GET /v1/models`` (and ``GET /v1/models/{name}``): the one served model, with ``max_model_len`` (the generator's
  context window) and ``max_logprobs``;
* ``POST /v1/completions``: legacy completions — ``prompt`` as text, texts, token ids or lists of token ids;
  ``max_tokens`` (0 only with ``echo``), ``temperature``, ``top_p``, ``top_k``, ``n``, ``seed``, ``stop``,
  ``logprobs`` (chosen-token and top-k raw log-probs, ``text_offset``), ``echo`` (the prompt's tokens and their
  teacher-forced log-probs first), ``return_tokens_as_token_ids``;
* ``POST /v1/chat/completions``: ``messages`` rendered with the model's chat template (``Generator.render_chat``),
  the same sampling fields, ``logprobs: bool`` and ``top_logprobs``;
* ``POST /v1/embeddings``: when an embedder is served beside the generator (``--embedder``, the embedded MiniLM by
  default on the CLI), its L2-normalised vectors of ``input`` (a text or texts) as JSON numbers or base64
  (:mod:`workbench.serve.openai_embeddings`); ``/v1/models`` lists it too. Embedding requests run one at a time on
  their own worker thread, at most ``max_queue`` waiting (503 beyond);
* ``GET /health``: ``{"status": "ok", "model", "max_model_len", "queue", "embedder"}``, never waiting on the model.

Requests are checked (:mod:`workbench.serve.openai_schema`), split into one work per prompt and queued on a
:class:`~workbench.serve.scheduler.BatchScheduler` whose batching key is the decoding parameters: the works waiting
together with equal parameters are answered by ONE ``Generator.generate`` call (:mod:`workbench.serve.openai_engine`);
greedy and sampled requests never share one. This is request-level batching: a request joins the next call, not a
running one. One call generates at most ``max_batch_tokens`` tokens (prompts × n × max_tokens over its requests), and
takes the clients (their IP addresses) in turn behind the head request. ``stream: true`` answers the same result as
server-sent events (:mod:`workbench.serve.openai_stream`): with continuous batching token by token as it is decoded,
at the request level once it is computed. A request without ``seed`` gets a
fresh seed (its samples differ from every other request's); one with a seed is reproducible. The generation cache is
off unless the generator was given one.

**Work per request** is bounded (:class:`ModelServeLimits`): prompts × ``n``, those sequences × ``max_tokens``, the
prompt tokens echoed with log-probs. **A request whose client disconnects** is dropped from the queue, and a running
batch whose every request was abandoned (client gone, deadline passed) is interrupted before the model's next
forward, so the next request does not wait for work nobody reads (:mod:`workbench.core.interrupt`). **SIGTERM** (or
Ctrl-C) stops the server within seconds: queued requests get 503 and the running batch is interrupted
(:mod:`workbench.serve.uvicorn_run`).

Errors are OpenAI-shaped, ``{"error": {"message": "<one line>", "type", "param", "code"}}``: 400 a value out of range
(too many log-probs, ``max_tokens`` 0 without ``echo``, a prompt over the context window, more work than the request
limits, a lone surrogate in a text, a seed past 64 bits …; a huge number is never quoted back), 404 an unknown model
(``code: model_not_found``) or route, 405 a wrong HTTP method, 413 a body over the size limit, 422 a body that is not
strict JSON (also a repeated key, NaN, nesting past 64 levels: :mod:`workbench.serve.strict_body`) or has wrong
types, 503 queue full (``Retry-After``) or shutting down, 504 past the request deadline, 500 a bug (logged). Unknown
request fields are ignored.

:func:`start_in_thread` runs a server on a free localhost port in a background thread (tests, parity checks);
:func:`run_model_server` serves until interrupted (the CLI). Importing this module loads FastAPI and numpy; torch and
transformers load with the generator, uvicorn when a server starts.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations as objects.

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from workbench.backends.embedder import Embedder
from workbench.backends.gencache import GenerationCache
from workbench.backends.generator import Generator
from workbench.serve.openai_bundle import V1BodySizeLimit, error_body, error_param
from workbench.serve.openai_embeddings import EmbeddingRequest, count_tokens, embedding_answer, embedding_work
from workbench.serve.openai_engine import Answered, ModelEngine
from workbench.serve.openai_schema import (
    ApiError,
    ChatRequest,
    CompletionRequest,
    Limits,
    Work,
    chat_work,
    check_model,
    completion_works,
)
from workbench.serve.openai_stream import (
    DONE,
    ProgressFeed,
    answered_so_far,
    chat_chunks,
    completion_chunks,
    event,
    event_stream,
    events_response,
)
from workbench.serve.scheduler import BatchScheduler, DeadlineExpired, Job, QueueFull, SchedulerClosed
from workbench.serve.strict_body import StrictJSONRoute, install_refusal_handlers
from workbench.serve.uvicorn_run import ServerThread, run_uvicorn
from workbench.serve.waiting import CLIENT_CLOSED, ClientGone, NotInTime, job_answers

logger = logging.getLogger("workbench.serve")

_MAX_MESSAGE_CHARS = 500


@dataclass(frozen=True)
class ModelServeLimits:
    """Limits and scheduling of ``serve-model``: ``max_logprobs`` alternatives per position (400 beyond), ``max_n``
    samples per prompt, ``max_prompts`` prompts per request, ``max_sequences`` prompts × n per request,
    ``max_request_tokens`` sequences × max_tokens per request (the tokens a request may have generated),
    ``max_echo_tokens`` prompt tokens a request may echo with log-probs (400 beyond each), ``default_max_tokens`` when a
    request names none, ``max_body_bytes`` (413 beyond), ``max_queue`` prompts waiting (503 beyond),
    ``max_batch_prompts`` prompts per engine call across requests, ``max_batch_tokens`` tokens one engine call may
    generate across requests (prompts × n × max_tokens summed; a single request over it still runs, alone),
    ``continuous``: requests join a running batch between decoding steps (:mod:`workbench.serve.continuous`; off: each
    engine call answers the requests queued when it starts), ``echo_cache_tokens`` the tokens of echoed prompts whose KV
    caches are kept across requests (0: none; :mod:`workbench.backends.echo_cache`), ``max_gather_s`` how long the
    worker may wait for a batch's clients to come back, ``timeout_s`` from a request's arrival to its answer (504
    beyond; a running batch of requests all past it is interrupted), ``max_embed_inputs`` texts per embeddings request
    (400 beyond)."""

    max_logprobs: int = 20
    max_n: int = 64
    max_prompts: int = 256
    max_sequences: int = 256
    max_request_tokens: int = 16384
    max_echo_tokens: int = 16384
    default_max_tokens: int = 16
    max_body_bytes: int = 8 << 20
    max_queue: int = 1024
    max_batch_prompts: int = 64
    max_batch_tokens: int = 65536
    max_gather_s: float = 0.05
    continuous: bool = True
    echo_cache_tokens: int = 8192
    timeout_s: float = 600.0
    max_embed_inputs: int = 2048

    def __post_init__(self) -> None:
        counts = (
            "max_embed_inputs",
            "max_n",
            "max_prompts",
            "max_sequences",
            "max_request_tokens",
            "max_echo_tokens",
            "default_max_tokens",
            "max_body_bytes",
            "max_queue",
            "max_batch_prompts",
            "max_batch_tokens",
        )
        for name in counts:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("max_logprobs", "echo_cache_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if not self.timeout_s > 0 or not self.max_gather_s >= 0:
            raise ValueError("timeout_s must be > 0 and max_gather_s >= 0")


def _one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= _MAX_MESSAGE_CHARS else line[: _MAX_MESSAGE_CHARS - 1] + "…"


def _error(
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """An OpenAI-shaped error response (one-line message)."""
    body = error_body(status, _one_line(message), param=param, code=code)
    return JSONResponse(body, status_code=status, headers=headers)


def _validation_message(errors: Sequence[dict[str, Any]]) -> str:
    """pydantic / FastAPI errors → one line (``malformed JSON body: …``, ``max_tokens: Input should be …``)."""
    parts = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        if err.get("type") == "json_invalid":
            parts.append(f"malformed JSON body: {(err.get('ctx') or {}).get('error', 'decode error')}")
        elif (err.get("type") == "missing" and not loc) or isinstance(err.get("input"), bytes):
            parts.append("send a JSON object body with Content-Type: application/json")
        else:
            parts.append(f"{'.'.join(loc) or 'body'}: {err.get('msg', 'invalid')}")
    parts = list(dict.fromkeys(parts))
    more = f" (and {len(parts) - 3} more)" if len(parts) > 3 else ""
    return "; ".join(parts[:3]) + more if parts else "invalid request"


def create_model_app(
    generator: Any,
    *,
    served_name: str,
    limits: ModelServeLimits | None = None,
    embedder: Any = None,
    embedder_name: str | None = None,
) -> FastAPI:
    """The FastAPI app serving ``generator`` (a :class:`~workbench.backends.generator.Generator`) as the OpenAI model
    ``served_name`` and, when given, ``embedder`` (an :class:`~workbench.backends.embedder.Embedder`) as the model
    ``embedder_name`` on ``/v1/embeddings`` (see the module docstring). ``app.state.scheduler`` is its scheduler
    (closed at shutdown), ``app.state.engine`` its :class:`~workbench.serve.openai_engine.ModelEngine`."""
    limits = limits or ModelServeLimits()
    if embedder is not None and not embedder_name:
        raise ValueError("an embedder needs its served name (embedder_name)")
    if embedder_name == served_name:
        raise ValueError(f"the embedder and the generator are both named {served_name!r}: give them distinct names")
    request_limits = Limits(
        max_logprobs=limits.max_logprobs,
        max_n=limits.max_n,
        max_prompts=limits.max_prompts,
        max_sequences=limits.max_sequences,
        max_request_tokens=limits.max_request_tokens,
        default_max_tokens=limits.default_max_tokens,
    )
    engine = ModelEngine(
        generator,
        seed=int(getattr(generator, "seed", 0) or 0),
        max_echo_tokens=limits.max_echo_tokens,
        max_top_logprobs=limits.max_logprobs,
        echo_cache_tokens=limits.echo_cache_tokens,
    )
    requests = itertools.count(1)  # tells one request's works from another's in an engine call
    # continuous batching decodes outside Generator.generate: not with a generation cache (its hits skip decoding)
    joining = limits.continuous and getattr(generator, "cache", None) is None
    scheduler = BatchScheduler(
        engine.answer_joining if joining else engine.answer,  # type: ignore[arg-type]  # works; key: the sampling
        max_queue=limits.max_queue,
        max_batch_questions=limits.max_batch_prompts,
        max_gather_s=0.0 if joining else limits.max_gather_s,  # a running batch takes late requests anyway
        max_batch_tokens=limits.max_batch_tokens,
        joining=joining,
    )
    routes = "GET /v1/models, POST /v1/completions, POST /v1/chat/completions, POST /v1/embeddings, GET /health"
    # embeddings run one request at a time beside the generator's batches; ``embedding_waiting`` bounds the queue
    embedding_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="serve-embed")
    embedding_waiting = [0]

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        scheduler.close()
        embedding_worker.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(
        title=f"workbench serve-model — {served_name}",
        description="An OpenAI-compatible server over the workbench's in-process generator (docs/served-models.md).",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.router.route_class = StrictJSONRoute  # every route below parses its JSON body strictly
    app.state.scheduler = scheduler
    app.state.engine = engine
    app.add_middleware(V1BodySizeLimit, max_bytes=limits.max_body_bytes)

    install_refusal_handlers(
        app,
        routes=routes,
        error=_error,
        on_invalid=lambda errors: _error(422, _validation_message(errors), param=error_param(errors)),
        logger=logger,
    )

    def card() -> dict[str, Any]:
        return {
            "id": served_name,
            "object": "model",
            "created": 0,
            "owned_by": "workbench",
            "max_model_len": int(generator.max_context),
            "max_logprobs": limits.max_logprobs,
        }

    def embedder_card() -> dict[str, Any]:
        seq = getattr(getattr(embedder, "_model", None), "max_seq_length", None)
        return {
            "id": embedder_name,
            "object": "model",
            "created": 0,
            "owned_by": "workbench",
            "max_model_len": int(seq) if seq else None,
            "dimensions": int(embedder.dim),
        }

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "model": served_name,
            "max_model_len": int(generator.max_context),
            "queue": scheduler.stats(),
            "embedder": embedder_name if embedder is not None else None,
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [card(), *([embedder_card()] if embedder is not None else [])]}

    @app.get("/v1/models/{model:path}")
    async def model(model: str) -> Response:
        if embedder is not None and model == embedder_name:
            return JSONResponse(embedder_card())
        try:
            check_model(model, served_name)
        except ApiError as exc:
            return _error(exc.status, exc.message, param=exc.param, code=exc.code)
        return JSONResponse(card())

    def submitted(works: list[Work], request: Request, progress: Any = None) -> tuple[Job, float]:
        """The works queued on the scheduler as one job (``progress``: its :attr:`Job.progress`), with its deadline;
        503 when the queue is full or the server shutting down."""
        deadline = time.monotonic() + limits.timeout_s
        try:
            job = scheduler.submit(
                works,  # type: ignore[arg-type]
                works[0].sampling.key(),
                deadline,
                client=request.client.host if request.client else "",
                tokens=sum(w.sampling.n * w.sampling.max_tokens for w in works),
                progress=progress,
            )
        except QueueFull as exc:
            raise ApiError(503, str(exc), headers={"Retry-After": str(exc.retry_after_s)}) from None
        except SchedulerClosed as exc:
            raise ApiError(503, str(exc)) from None
        return job, deadline

    def checked(results: list[Any]) -> list[Answered]:
        for result in results:
            if isinstance(result, ApiError):
                raise result
        return results

    async def answered(works: list[Work], request: Request) -> list[Answered]:
        """The works' answers, through the scheduler: an :class:`ApiError` for any refusal, :class:`ClientGone` when
        the client disconnected first (the works are then dropped, or their batch interrupted)."""
        job, deadline = submitted(works, request)
        return checked(await _wait(job, request, deadline))

    def whole(results: Sequence[Answered]) -> list[tuple[dict[str, Any], list[int]]]:
        return [(c, s) for r in results for c, s in zip(r.choices, r.pieces or [], strict=True)]

    async def streamed(works: list[Work], request: Request, chunks: Any, include: bool) -> Response:
        """A streamed answer (``chunks(choices, usage, complete=, decoding=)`` writes its chunks). With continuous
        batching the stream begins with the first settled piece and sends each step's new pieces as they are
        decoded; a request refused (or answered) before its first piece gets its JSON error (or its whole stream)."""
        feed = ProgressFeed(asyncio.get_running_loop())
        job, deadline = submitted(works, request, feed if joining else None)
        waiting = asyncio.ensure_future(_wait(job, request, deadline))
        update = asyncio.ensure_future(feed.next())
        try:
            await asyncio.wait({waiting, update}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            waiting.cancel()
            update.cancel()
            raise
        if waiting.done():
            update.cancel()
            results = checked(waiting.result())
            return event_stream(chunks(whole(results), usage(results) if include else None))
        return events_response(live(len(works), feed, update, waiting, chunks, include))

    async def live(
        count: int, feed: ProgressFeed, pending: Any, waiting: Any, chunks: Any, include: bool
    ) -> AsyncIterator[str]:
        """The events of a stream under way: each update's new chunks (those of the answer so far not sent yet),
        then the rest of the complete answer's and ``[DONE]``; a failure after the stream began is one ``error``
        event, without ``[DONE]``."""
        states: dict[int, Answered] = {}
        sent = 0
        try:
            while True:
                await asyncio.wait({waiting, pending}, return_when=asyncio.FIRST_COMPLETED)
                if not pending.done():
                    break
                states.update(pending.result())
                choices, _, decoding = answered_so_far(states, count)
                # usage null on every chunk when include_usage: pass a placeholder, its own chunk comes at the end
                out = list(chunks(choices, {} if include else None, complete=False, decoding=decoding))
                for chunk in out[sent:]:
                    yield event(chunk)
                sent = max(sent, len(out))
                pending = asyncio.ensure_future(feed.next())
            try:
                results = checked(waiting.result())
            except ApiError as exc:
                yield event(error_body(exc.status, _one_line(exc.message), param=exc.param, code=exc.code))
                return
            except ClientGone:
                return
            for chunk in list(chunks(whole(results), usage(results) if include else None))[sent:]:
                yield event(chunk)
            yield DONE
        finally:
            pending.cancel()
            waiting.cancel()  # a client gone mid-stream: the job is cancelled (its rows leave the batch)

    async def _wait(job: Job, request: Request, deadline: float) -> list[Any]:
        try:
            return await job_answers(scheduler, job, request, deadline)
        except ClientGone:
            raise
        except NotInTime:
            raise ApiError(504, f"not answered within the {limits.timeout_s:g} s deadline") from None
        except DeadlineExpired:
            raise ApiError(
                504, f"not answered within the {limits.timeout_s:g} s deadline (dropped while queued)"
            ) from None
        except SchedulerClosed as exc:
            raise ApiError(503, str(exc)) from None
        except ApiError:
            raise
        except ValueError as exc:  # the generator refused a value
            raise ApiError(400, str(exc)) from None
        except Exception:
            logger.exception("answering %d prompt(s) failed", len(job.questions))
            raise ApiError(500, "internal server error while answering; see the server log") from None

    def usage(results: Sequence[Answered]) -> dict[str, int]:
        prompt = sum(r.prompt_tokens for r in results)
        completion = sum(r.completion_tokens for r in results)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def head(kind: str, prefix: str) -> dict[str, Any]:
        return {"id": f"{prefix}-{uuid.uuid4().hex}", "object": kind, "created": int(time.time()), "model": served_name}

    def include_usage(body: CompletionRequest | ChatRequest) -> bool:
        return bool(body.stream_options and body.stream_options.include_usage)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        try:
            works = completion_works(body, served_name, request_limits, next(requests))
            if body.stream:
                top = head("text_completion", "cmpl")
                return await streamed(
                    works, request, lambda *a, **k: completion_chunks(top, *a, **k), include_usage(body)
                )
            results = await answered(works, request)
        except ApiError as exc:
            return _error(exc.status, exc.message, param=exc.param, code=exc.code, headers=exc.headers)
        except ClientGone:
            return Response(status_code=CLIENT_CLOSED)  # never sent: the access log shows it
        choices = [choice for result in results for choice in result.choices]
        payload = {
            **head("text_completion", "cmpl"),
            "choices": [{"index": i, **choice} for i, choice in enumerate(choices)],
            "usage": usage(results),
        }
        return JSONResponse(payload)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatRequest, request: Request) -> Response:
        try:
            works = [chat_work(body, served_name, request_limits, next(requests))]
            if body.stream:
                top = head("chat.completion.chunk", "chatcmpl")
                return await streamed(works, request, lambda *a, **k: chat_chunks(top, *a, **k), include_usage(body))
            results = await answered(works, request)
        except ApiError as exc:
            return _error(exc.status, exc.message, param=exc.param, code=exc.code, headers=exc.headers)
        except ClientGone:
            return Response(status_code=CLIENT_CLOSED)
        payload = {
            **head("chat.completion", "chatcmpl"),
            "choices": [{"index": i, **choice} for i, choice in enumerate(results[0].choices)],
            "usage": usage(results),
        }
        return JSONResponse(payload)

    @app.post("/v1/embeddings")
    async def embeddings(body: EmbeddingRequest) -> Response:
        try:
            if embedder is None:
                raise ApiError(
                    404,
                    f"this server serves no embedder (the model {body.model!r} does not exist)",
                    "model",
                    "model_not_found",
                )
            work = embedding_work(body, str(embedder_name), int(embedder.dim), limits.max_embed_inputs)
            vectors, tokens = await embedded(work.texts)
        except ApiError as exc:
            return _error(exc.status, exc.message, param=exc.param, code=exc.code, headers=exc.headers)
        return JSONResponse(embedding_answer(vectors, work, str(embedder_name), tokens))

    async def embedded(texts: list[str]) -> tuple[Any, int]:
        """The embedder's rows of ``texts`` and their token count, on the embedding worker: 503 when
        ``max_queue`` requests already wait, 504 past the deadline, 500 (logged) when the embedder fails."""
        if embedding_waiting[0] >= limits.max_queue:
            raise ApiError(503, f"{embedding_waiting[0]} embedding requests are waiting", headers={"Retry-After": "1"})
        embedding_waiting[0] += 1
        try:
            future = embedding_worker.submit(lambda: (embedder.encode(texts), count_tokens(embedder, texts)))
            return await asyncio.wait_for(asyncio.wrap_future(future), limits.timeout_s)
        except TimeoutError:
            raise ApiError(504, f"not answered within the {limits.timeout_s:g} s deadline") from None
        except RuntimeError as exc:  # the worker was shut down
            raise ApiError(503, f"shutting down ({exc})") from None
        except Exception:
            logger.exception("embedding %d text(s) failed", len(texts))
            raise ApiError(500, "internal server error while embedding; see the server log") from None
        finally:
            embedding_waiting[0] -= 1

    return app


def load_embedder(model: str | Path, *, device: str = "cpu", batch_size: int = 64) -> Any:
    """The :class:`~workbench.backends.embedder.Embedder` ``serve-model`` serves on ``/v1/embeddings``: ``model``
    resolved as the recipe's ``embedder.model`` is, without the embedding cache (the reference server computes every
    vector)."""

    return Embedder(model, batch_size=batch_size, cache=False, device=device)


def load_generator(
    model: str | Path,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    batch_size: int = 8,
    max_context: int | None = None,
    seed: int = 0,
    cache: bool | Any = False,
) -> Any:
    """The :class:`~workbench.backends.generator.Generator` ``serve-model`` serves: ``model`` resolved exactly as
    ``Generator(model)`` resolves it; the generation cache off unless ``cache`` (True: the default cache file, or a
    :class:`~workbench.backends.gencache.GenerationCache`)."""

    store = None
    if cache is True:
        store = GenerationCache()
    elif cache:
        store = cache
    return Generator(
        model, device=device, dtype=dtype, batch_size=batch_size, max_context=max_context, seed=seed, cache=store
    )


class ModelServer(ServerThread):
    """A ``serve-model`` server running in a background thread (see :func:`start_in_thread`): ``url`` is its root
    (``http://127.0.0.1:PORT``), ``base_url`` the OpenAI base URL (``url + "/v1"``), ``generator`` what it serves,
    ``app`` its FastAPI app. :meth:`stop` shuts it down; it is also a context manager."""

    def __init__(
        self, app: FastAPI, generator: Any, served_name: str, host: str, port: int, embedder: Any = None
    ) -> None:
        super().__init__(app, host=host, port=port, name="serve-model", on_shutdown=app.state.scheduler.close)
        self.generator, self.served_name, self.embedder = generator, served_name, embedder
        self.base_url = ""

    def _start(self, timeout: float) -> None:
        self.start(timeout)
        self.base_url = f"{self.url}/v1"


def start_in_thread(
    model: Any = "smollm2",
    *,
    served_name: str | None = None,
    max_logprobs: int = 20,
    batch_size: int = 8,
    device: str = "cpu",
    dtype: str = "float32",
    cache: bool | Any = False,
    host: str = "127.0.0.1",
    port: int = 0,
    limits: ModelServeLimits | None = None,
    ready_timeout: float = 30.0,
    embedder: Any = None,
    embedder_name: str | None = None,
) -> ModelServer:
    """Start ``serve-model`` in a background thread on ``host`` (port 0: a free one) and return its
    :class:`ModelServer` once it accepts connections.

    ``model`` is a model reference (loaded with :func:`load_generator`) or an already loaded ``Generator``, which is
    then served as it is (its own cache, batch size and counter: tests count its calls). ``served_name`` defaults to
    ``str(model)`` for a reference, else the generator's resolved reference. ``limits`` replaces the defaults, its
    ``max_logprobs`` taken from ``max_logprobs`` unless given. ``embedder`` (a reference loaded with
    :func:`load_embedder`, or an ``Embedder``) is served on ``/v1/embeddings`` as ``embedder_name`` (default: the
    reference as given, else ``"embedder"``); None serves none.
    """

    if isinstance(model, str | Path):
        generator = load_generator(model, device=device, dtype=dtype, batch_size=batch_size, cache=cache)
        name = served_name or str(model)
    else:
        generator = model
        name = served_name or str(getattr(getattr(generator, "resolved", None), "ref", "") or "model")
    limits = limits or replace(ModelServeLimits(), max_logprobs=max_logprobs)
    if isinstance(embedder, str | Path):
        embedder_name = embedder_name or str(embedder)
        embedder = load_embedder(embedder, device=device)
    elif embedder is not None:
        embedder_name = embedder_name or "embedder"
    app = create_model_app(generator, served_name=name, limits=limits, embedder=embedder, embedder_name=embedder_name)
    server = ModelServer(app, generator, name, host, port, embedder)
    server._start(ready_timeout)
    return server


def run_model_server(
    generator: Any,
    *,
    served_name: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: ModelServeLimits | None = None,
    log_level: str = "info",
    embedder: Any = None,
    embedder_name: str | None = None,
) -> None:
    """Serve ``generator`` (and ``embedder`` as ``embedder_name``, when given) with uvicorn until interrupted
    (Ctrl-C, SIGTERM: within seconds, the running batch interrupted); prints one line with the base URL once bound.
    The API has no authentication: bind another interface than localhost only behind something that provides it."""

    app = create_model_app(
        generator, served_name=served_name, limits=limits, embedder=embedder, embedder_name=embedder_name
    )
    run_uvicorn(
        app,
        host=host,
        port=port,
        log_level=log_level,
        announce=lambda url: (
            f"workbench serve-model: {served_name}"
            + (f" and the embedder {embedder_name}" if embedder is not None else "")
            + f" at {url}/v1"
        ),
        on_shutdown=app.state.scheduler.close,
    )
