"""The HTTP side of a served generator: bounded requests, checked answers, retries, one-line errors.

:class:`ServedClient` sends legacy completions and chat completions to an OpenAI-compatible server
(docs/served-models.md) with ``httpx``, on one event loop shared by every client of the process, so a request can be
cut off at any moment:

* **the whole request is bounded**: ``timeout_s`` runs from the first byte sent to the last byte read (a server that
  dribbles its answer a byte at a time is cut off at ``timeout_s``, not reset by every byte);
* **the answer's size is bounded**: a request states how large its answer can reasonably be
  (:func:`answer_size_cap`); a longer one is cut off and counts as a failed attempt;
* **every answer is read by a caller's parser** (the readers of :mod:`workbench.backends.served_answers`) inside the
  retry loop, so an answer that breaks the protocol (``logprobs: null``, NaN or positive log-probs, a short list,
  the wrong number of choices, another model's answer) is retried like a dropped connection, then fails with the
  reason.

Failed attempts — unreachable, timed out, too large, HTTP 408 / 409 / 429 / 5xx, a malformed or invalid answer —
are retried ``retries`` times with exponential backoff (``Retry-After`` honoured up to :data:`MAX_BACKOFF_S`); other
4xx answers are final. What survives the retries is a :class:`ServedModelError`: one line naming the URL, the model
and what failed. Requests run on a thread pool of ``max_concurrency`` workers (:meth:`ServedClient.map`), so an
engine with continuous batching (vLLM, SGLang, TGI, ``workbench serve-model``) sees that many requests in flight.

The API key is read from the environment variable *named* by ``api_key_env`` when the client is built and is kept
only in the HTTP client's headers: it is never logged or written.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar

from workbench.backends.served_answers import InvalidAnswer, joined_completions
from workbench.core.errors import WorkbenchError, one_line

T = TypeVar("T")

RETRIED_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))
"""HTTP statuses worth another attempt (as the ``openai`` client retries them)."""
MAX_BACKOFF_S = 8.0
"""Longest wait between two attempts."""
MIN_ANSWER_BYTES = 4 << 20
"""The smallest answer-size cap: any request may be answered with this many bytes."""
BYTES_PER_LOGPROB_ENTRY = 128
"""Bytes one log-prob entry may take in JSON (a token string or ``"token_id:<id>"``, its value, chat's ``bytes``
list), with room to spare: what :func:`answer_size_cap` counts per position and alternative."""


class ServedModelError(WorkbenchError):
    """A served model cannot be reached or answered wrongly (after the client's retries)."""


@dataclass(frozen=True)
class ServedSettings:
    """How to reach a served model: ``base_url`` (ending in ``/v1``), the served ``model`` name, the *name* of the
    environment variable holding the API key (None: no key is sent), ``timeout_s`` for each whole request (first
    byte sent to last byte read), ``retries`` of a failed or invalid answer (with exponential backoff),
    ``max_concurrency`` requests in flight, and the recipe ``section`` these settings come from (``generator`` or
    ``embedder``: errors name its keys)."""

    base_url: str
    model: str
    api_key_env: str | None = None
    timeout_s: float = 120.0
    retries: int = 3
    max_concurrency: int = 16
    section: str = "generator"

    def validate(self, where: str | None = None) -> None:
        """One-line :class:`ServedModelError` for settings that cannot work (checked before any request); ``where``
        defaults to the section."""
        where = where or self.section
        if not self.base_url.startswith(("http://", "https://")):
            raise ServedModelError(f"base_url must start with http:// or https://, got {self.base_url!r}", where)
        if not self.model:
            raise ServedModelError(f"the served model name ({self.section}.model) is empty", where)
        if self.timeout_s <= 0 or self.retries < 0 or self.max_concurrency < 1:
            raise ServedModelError("timeout_s must be > 0, retries >= 0 and max_concurrency >= 1", where)
        if self.api_key_env is not None and not os.environ.get(self.api_key_env):
            raise ServedModelError(
                f"the API key variable {self.api_key_env} is not set"
                f" (export it, or set {self.section}.api_key_env: null)",
                where,
            )


def answer_size_cap(positions: int, alternatives: int) -> int:
    """The most bytes an answer may take: ``positions`` token positions in all its choices (prompt tokens echoed
    included), each with its chosen token and ``alternatives`` top-k entries, at
    :data:`BYTES_PER_LOGPROB_ENTRY` bytes an entry, doubled; never below :data:`MIN_ANSWER_BYTES`."""
    return max(MIN_ANSWER_BYTES, 2 * BYTES_PER_LOGPROB_ENTRY * max(positions, 0) * (max(alternatives, 0) + 2))


class _Failure(Exception):
    """One failed attempt: what failed (a short phrase), whether another attempt may help, and how long the server
    asked to wait (``Retry-After``)."""

    def __init__(self, detail: str, retry: bool, wait_s: float | None = None) -> None:
        super().__init__(detail)
        self.detail, self.retry, self.wait_s = detail, retry, wait_s


class _Loop:
    """The process's one event loop for served requests, on a daemon thread (started on first use, again after a
    fork)."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _pid = 0

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or cls._pid != os.getpid():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="served-http", daemon=True).start()
                cls._loop, cls._pid = loop, os.getpid()
            return cls._loop


def _server_message(status: int, body: bytes) -> str:
    """``HTTP <status>: <the server's error message>`` (its first line, cut to 200 characters)."""
    message = ""
    try:
        parsed = json.loads(body)
        inner = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
        message = str(inner.get("message", "") if isinstance(inner, dict) else inner)
    except (ValueError, RecursionError):
        message = body[:200].decode("utf-8", errors="replace")
    first = message.strip().splitlines()[0] if message.strip() else ""
    return f"HTTP {status}: {one_line(first[:200])}".rstrip(": ")


def _retry_after(headers: Any) -> float | None:
    value = headers.get("retry-after")
    try:
        return min(float(value), MAX_BACKOFF_S) if value is not None else None
    except ValueError:
        return None


class ServedClient:
    """One served model's HTTP client (see the module docstring), with a thread pool of ``max_concurrency``
    workers."""

    def __init__(self, settings: ServedSettings) -> None:
        import httpx

        settings.validate()
        self.settings = settings
        key = os.environ.get(settings.api_key_env, "") if settings.api_key_env else ""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._loop = _Loop.get()
        self._http = httpx.AsyncClient(
            base_url=settings.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(settings.timeout_s),
            limits=httpx.Limits(max_connections=settings.max_concurrency + 1),
            follow_redirects=False,
        )
        self._pool = ThreadPoolExecutor(max_workers=settings.max_concurrency, thread_name_prefix="served")

    def __repr__(self) -> str:  # never the key
        return f"ServedClient({self.settings.base_url!r}, model={self.settings.model!r})"

    def fail(self, what: str, detail: str | None = None) -> ServedModelError:
        """A :class:`ServedModelError` naming the URL, the model and ``what`` failed (with ``detail``)."""
        return ServedModelError(
            f"{what}: {detail}" if detail else what, f"{self.settings.base_url} (model {self.settings.model})"
        )

    # ------------------------------------------------------------------ one attempt
    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _fetch(self, method: str, path: str, body: dict[str, Any] | None, cap: int) -> Any:
        """One attempt: the parsed JSON answer, or :class:`_Failure`. The whole exchange is bounded by
        ``timeout_s`` and the answer by ``cap`` bytes."""
        import httpx

        async def exchange() -> tuple[int, Any, bytes]:
            async with self._http.stream(method, path, json=body) as response:
                size, chunks = 0, []
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > cap:
                        raise _Failure(f"answer larger than {cap} bytes (cut off)", True)
                    chunks.append(chunk)
                return response.status_code, response.headers, b"".join(chunks)

        try:
            status, headers, content = await asyncio.wait_for(exchange(), self.settings.timeout_s)
        except (TimeoutError, httpx.TimeoutException):
            limit = self.settings.timeout_s
            raise _Failure(f"timed out (a whole request may take timeout_s = {limit:g} s)", True) from None
        except httpx.HTTPError as exc:
            cause = str(exc).splitlines()[0] if str(exc) else ""
            raise _Failure(
                f"unreachable ({type(exc).__name__}: {one_line(cause[:200])})".replace(": )", ")"), True
            ) from None
        if status >= 400:
            raise _Failure(_server_message(status, content), status in RETRIED_STATUSES, _retry_after(headers))
        try:
            return json.loads(content)
        except (ValueError, RecursionError) as exc:
            raise _Failure(f"malformed answer (not JSON: {type(exc).__name__})", True) from None

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        *,
        what: str,
        read: Callable[[Any], T],
        cap: int = MIN_ANSWER_BYTES,
        retry: bool = True,
    ) -> T:
        """``read(answer)`` of the first good answer to ``method path`` with JSON ``body`` (see the module docstring);
        ``read`` raises :class:`~workbench.backends.served_answers.InvalidAnswer` for an answer it cannot use (then
        the request is sent again). ``retry=False`` sends it once (the probe: a server refusing an extension must not
        be asked again). :class:`ServedModelError` naming ``what`` failed, after the last attempt."""
        attempts = self.settings.retries + 1 if retry else 1
        last: _Failure | None = None
        for attempt in range(attempts):
            if attempt and last is not None:
                time.sleep(last.wait_s if last.wait_s is not None else min(0.25 * 2**attempt, MAX_BACKOFF_S))
            try:
                answer = self._run(self._fetch(method, path, body, cap))
                return read(answer)
            except _Failure as exc:
                last = exc
                if not exc.retry:
                    break
            except InvalidAnswer as exc:
                last = _Failure(f"invalid answer ({exc})", True)
        assert last is not None
        raise self.fail(what, last.detail)

    # ------------------------------------------------------------------ the routes
    def _body(self, params: dict[str, Any], **fields: Any) -> dict[str, Any]:
        extra = params.pop("extra_body", None) or {}
        body = {"model": self.settings.model, **fields, **params, **extra}
        return {k: v for k, v in body.items() if v is not None}

    def _post(self, route: str, body: dict[str, Any], what: str, read: Any, cap: int, retry: bool) -> Any:
        """``POST route`` through :meth:`request`: the answer (a list of completions, as llama-server answers a list
        of prompts, joined into one first) must be the asked model's, then ``read`` reads it."""
        check = read or _as_object
        return self.request(
            "POST",
            route,
            body,
            what=what,
            read=lambda answer: check(self._same_model(joined_completions(answer))),
            cap=cap,
            retry=retry,
        )

    def _same_model(self, answer: Any) -> Any:
        """``answer`` unless it names another model than the one asked for (a missing name is accepted)."""
        if isinstance(answer, dict) and answer.get("model") not in (None, self.settings.model):
            raise InvalidAnswer(f"the answer is another model's, not {self.settings.model!r}'s")
        return answer

    def models(self) -> list[dict[str, Any]]:
        """The served models' entries (``GET /models``): each a mapping with an ``id`` string (and whatever else the
        server states: ``max_model_len``, ...)."""

        def read(answer: Any) -> list[dict[str, Any]]:
            data = answer.get("data") if isinstance(answer, dict) else None
            if not isinstance(data, list) or not all(
                isinstance(m, dict) and isinstance(m.get("id"), str) for m in data
            ):
                raise InvalidAnswer("'data' is not a list of models with string ids")
            return data

        return self.request("GET", "models", None, what="listing the models failed", read=read)

    def completion(
        self,
        prompt: str | list[int] | list[str] | list[list[int]],
        *,
        read: Callable[[dict[str, Any]], T] | None = None,
        cap: int = MIN_ANSWER_BYTES,
        retry: bool = True,
        **params: Any,
    ) -> Any:
        """One legacy completion (``POST /completions``); ``params`` are request fields, engine extensions in
        ``extra_body``. Returns ``read(answer)`` (default: the answer, as a dict, checked only to be an object of the
        asked model); see :meth:`request`."""
        body = self._body(dict(params), prompt=prompt)
        return self._post("completions", body, "a completion request failed", read, cap, retry)

    def chat(
        self,
        messages: list[dict[str, str]],
        *,
        read: Callable[[dict[str, Any]], T] | None = None,
        cap: int = MIN_ANSWER_BYTES,
        retry: bool = True,
        **params: Any,
    ) -> Any:
        """One chat completion (``POST /chat/completions``); as :meth:`completion`."""
        body = self._body(dict(params), messages=messages)
        return self._post("chat/completions", body, "a chat completion request failed", read, cap, retry)

    def map(self, call: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """``[call(item) for item in items]``, in the items' order, with up to ``max_concurrency`` calls in flight.
        A call that fails (after its own retries) fails the whole map: the calls not yet started are dropped, the
        running ones are waited for (no request outlives the map, no answer is half-used), then the error of the
        first failed item, in the items' order, is raised."""
        if len(items) <= 1:
            return [call(item) for item in items]
        futures = [self._pool.submit(call, item) for item in items]
        wait(futures, return_when=FIRST_EXCEPTION)
        if any(f.done() and not f.cancelled() and f.exception() is not None for f in futures):
            for future in futures:
                future.cancel()  # only the ones not started yet
            wait(futures)
            raise next(f.exception() for f in futures if not f.cancelled() and f.exception() is not None)
        return [future.result() for future in futures]

    def close(self) -> None:
        """Stop the worker threads and close the HTTP connections (the shared event loop keeps running)."""
        self._pool.shutdown(wait=True)
        if not self._loop.is_closed():
            self._run(self._http.aclose())


def _as_object(answer: Any) -> dict[str, Any]:
    if not isinstance(answer, dict):
        raise InvalidAnswer("the answer is not a JSON object")
    return answer
