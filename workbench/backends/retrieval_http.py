"""A retriever server as a retrieval engine (layer 3): the client of the ``POST /retrieve`` shape that FlashRAG-style
and Search-R1-style retriever servers speak, and ``workbench serve-retriever`` serves.

**The wire shape.** The request is ``{"queries": [...], "topk": k, "return_scores": true}``; the answer is
``{"result": [hits of query 0, hits of query 1, ...]}`` (a bare list of them is read too), each hit
``{"document": {...}, "score": s}``, best first. A document carries its ``id`` and either FlashRAG's ``contents``
(the title on the first line, in double quotes in FlashRAG's Wikipedia corpora, then the text) or separate ``title``
and ``text`` fields (read first when present; ``doc_id`` too). Each hit becomes ``(id, score, {"text", "title",
"doc_id"})``, so a server holding documents outside the run's corpus can be used where the retriever base accepts
them.

**Requests.** The queries go ``connection.batch_size`` per request, ``connection.max_concurrency`` requests in
flight; each request is tried ``1 + retries`` times (a transport error, a timeout, HTTP 429 or 5xx: the server or the
engine behind it failed) with exponential backoff, through :meth:`ExternalRetriever._with_retries`. A token in the
environment variable ``credentials_env`` names is sent as ``Authorization: Bearer``; HTTP 401 / 403 is one line at
once, never retried. An answer that does not parse is one line naming the URI and what was wrong with it; the body
itself is never quoted (nor is a server's error message: a status code and its standard phrase only).

**Channels.** The server decides what it searches: the recipe's ``channel`` declares it. When the server is
``workbench serve-retriever`` its ``GET /health`` says which channel it serves, and a recipe declaring another is
refused when the retriever is built; another server's declaration cannot be checked. The queries are never embedded
here (the server embeds them), so no embedder is needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from workbench.backends.cost import CostCounter
from workbench.backends.retrieval_engines import CHANNELS, Connection, ExternalRetriever
from workbench.backends.retrievers import RetrievalResult
from workbench.core.errors import ConfigError

Hit = tuple[str, float, dict[str, str]]

SERVICE = "workbench serve-retriever"
"""The ``service`` field of ``workbench serve-retriever``'s ``GET /health``: how this client knows the server."""


class RetryableStatus(OSError):
    """The server answered HTTP 429 or 5xx: it (or the engine behind it) failed, and another try may succeed."""


class RefusedStatus(Exception):
    """The server refused the request itself (HTTP 4xx other than 429): no retry helps."""


class BadAnswer(Exception):
    """The server's answer is not the ``POST /retrieve`` shape (the message says what, never quoting the body)."""


def endpoints(uri: str) -> tuple[str, str]:
    """``(retrieve URL, health URL)`` of a server: ``uri`` is its ``POST /retrieve`` URL, or its root (``/retrieve``
    is appended); the health URL replaces the last path segment with ``health``. A one-line ConfigError for a URI
    that is not http(s) or has no host."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError("a retriever server's URI is http(s)://host:port[/retrieve]", "retrieval.connection.uri")
    path = parts.path.rstrip("/")
    if not path:
        path = "/retrieve"
    base = path.rsplit("/", 1)[0]
    retrieve = urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
    health = urlunsplit((parts.scheme, parts.netloc, f"{base}/health", "", ""))
    return retrieve, health


class HttpRetriever(ExternalRetriever):
    """A :class:`~workbench.backends.retrieval_engines.ExternalRetriever` over a ``POST /retrieve`` server (see the
    module docstring). Building it asks the server's ``GET /health`` once: an unreachable server or refused
    credentials is a one-line :class:`EngineError` then; a ``workbench serve-retriever`` serving another channel
    than ``connection.channel`` a one-line :class:`ConfigError`. ``served`` is what that health answer said (None
    from another kind of server)."""

    transient = (httpx.TransportError, RetryableStatus)
    failures = (RefusedStatus, BadAnswer, httpx.HTTPError)  # after ``transient``: a decoding error, redirects
    embeds_queries = False

    def __init__(
        self,
        passages: Any,
        connection: Connection,
        *,
        embedder: Any = None,
        counter: CostCounter | None = None,
    ) -> None:
        super().__init__(passages, connection, embedder=embedder, counter=counter)
        if connection.batch_size < 1 or connection.max_concurrency < 1:
            raise ConfigError("batch_size and max_concurrency must be >= 1", "retrieval.connection")
        self.url, self.health_url = endpoints(connection.uri)
        token = connection.secret()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(connection.timeout_s),
            limits=httpx.Limits(max_connections=connection.max_concurrency),
        )
        try:
            self.served: dict[str, Any] | None = self._with_retries("connect", self._health)
            self._check_channel()
        except BaseException:
            self._client.close()
            raise

    def _check_channel(self) -> None:
        """Refuse (one line) a recipe declaring a channel a ``serve-retriever`` says it does not search."""
        channels = (self.served or {}).get("channels")
        declared = self.connection.channel
        if isinstance(channels, list) and declared not in channels:
            offered = ", ".join(c for c in CHANNELS if c in channels)  # only names we know: nothing the server wrote
            raise ConfigError(
                f"the server at {self.connection.where} searches {offered or 'no known channel'}, the recipe declares"
                f" {declared}",
                "retrieval.connection.channel",
            )

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()

    def _count(self) -> int | None:
        """What the server's ``/health`` says it searches (``documents``: serve-retriever's); None for another kind
        of server, which cannot say (its probes alone fingerprint a bundle's index)."""
        served = self._health()
        documents = (served or {}).get("documents")
        return documents if isinstance(documents, int) and not isinstance(documents, bool) and documents >= 0 else None

    def _health(self) -> dict[str, Any] | None:
        """The server's ``GET /health`` answer when it is ``workbench serve-retriever``'s, else None (any answer
        proves the server is there; 401 / 403: the credentials are refused)."""
        response = self._client.get(self.health_url)
        _check_status(response)
        if response.status_code != 200:
            return None
        try:
            body = response.json()
        except ValueError:
            return None
        return body if isinstance(body, dict) and body.get("service") == SERVICE else None

    def _search(self, queries: list[str], k: int) -> list[RetrievalResult]:
        if not queries:
            return []
        size = self.connection.batch_size
        batches = [queries[i : i + size] for i in range(0, len(queries), size)]

        def one(batch: list[str]) -> list[list[Hit]]:
            return self._with_retries("retrieve", lambda: self._post(batch, k))

        workers = min(self.connection.max_concurrency, len(batches))
        if workers <= 1:
            answers = [one(batch) for batch in batches]
        else:
            with ThreadPoolExecutor(workers) as pool:
                answers = list(pool.map(one, batches))
        hits = [found for answer in answers for found in answer]
        return [self._result(query, found) for query, found in zip(queries, hits, strict=True)]

    def _post(self, queries: list[str], k: int) -> list[list[Hit]]:
        """One request: every query's hits, at most ``k`` each."""
        response = self._client.post(self.url, json={"queries": queries, "topk": k, "return_scores": True})
        _check_status(response)
        if response.status_code != 200:
            raise RefusedStatus(_status_words(response.status_code))
        try:
            body = response.json()
        except ValueError:
            raise BadAnswer("the answer is not JSON") from None
        return parse_answer(body, len(queries), k)


def _status_words(status: int) -> str:
    """``HTTP 503 Service Unavailable``: the code and the standard phrase (never the reason the server sent)."""
    try:
        return f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def _check_status(response: httpx.Response) -> None:
    """Raise for the statuses that decide what happens next: 429 / 5xx retried, 401 / 403 refused at once."""
    status = response.status_code
    if status == 429 or status >= 500:
        raise RetryableStatus(_status_words(status))
    if status in (401, 403):
        raise RefusedStatus(f"{_status_words(status)}: the credentials were refused")


def parse_answer(body: Any, queries: int, k: int) -> list[list[Hit]]:
    """The ``(id, score, fields)`` hits of each of ``queries`` queries in a ``POST /retrieve`` answer (at most ``k``
    each, the server's order kept); :class:`BadAnswer` naming the first thing that is not the shape."""
    result = body.get("result") if isinstance(body, dict) else body
    if not isinstance(result, list):
        raise BadAnswer('the answer has no "result" list')
    if len(result) != queries:
        raise BadAnswer(f"the answer holds {len(result)} result list(s) for {queries} queries")
    parsed = []
    for q, hits in enumerate(result):
        if not isinstance(hits, list):
            raise BadAnswer(f"result[{q}] is not a list of hits")
        parsed.append([_hit(hit, f"result[{q}][{i}]") for i, hit in enumerate(hits[:k])])
    return parsed


def _hit(hit: Any, where: str) -> Hit:
    if not isinstance(hit, dict) or not isinstance(hit.get("document"), dict):
        raise BadAnswer(f'{where} is not {{"document": {{...}}, "score": number}} (was return_scores ignored?)')
    score = hit.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        raise BadAnswer(f"{where}.score is not a finite number")
    document = hit["document"]
    pid = document.get("id")
    if isinstance(pid, bool) or not isinstance(pid, str | int) or pid == "":
        raise BadAnswer(f"{where}.document has no id (a string or an integer)")
    return str(pid), float(score), _fields(document, where)


def _fields(document: dict[str, Any], where: str) -> dict[str, str]:
    """``text``, ``title`` and ``doc_id`` of a document: its own fields when it has ``text``, else split from
    ``contents`` (the first line the title, without FlashRAG's surrounding double quotes)."""
    if isinstance(document.get("text"), str):
        fields = {"text": document["text"], "title": document.get("title") or ""}
    elif isinstance(document.get("contents"), str):
        title, _, text = document["contents"].partition("\n")
        if len(title) >= 2 and title.startswith('"') and title.endswith('"'):
            title = title[1:-1]
        fields = {"text": text, "title": title}
    else:
        raise BadAnswer(f'{where}.document has neither "contents" nor "text"')
    if not isinstance(fields["title"], str):
        raise BadAnswer(f"{where}.document.title is not a string")
    doc_id = document.get("doc_id")
    if isinstance(doc_id, str | int) and not isinstance(doc_id, bool):
        fields["doc_id"] = str(doc_id)
    return fields


def served_document(chunk_id: str, title: str, text: str, doc_id: str) -> dict[str, str]:
    """A passage as ``workbench serve-retriever`` sends it: FlashRAG's ``id`` and ``contents`` (the title in double
    quotes on the first line, then the text), and the separate ``title``, ``text`` and ``doc_id`` this client
    reads first."""
    return {"id": chunk_id, "contents": f'"{title}"\n{text}', "title": title, "text": text, "doc_id": doc_id}


def hits_as_answer(results: Sequence[Sequence[tuple[dict[str, str], float]]], scores: bool) -> dict[str, Any]:
    """The ``POST /retrieve`` answer for every query's ``(document, score)`` hits: Search-R1's ``{"result": [[{
    "document", "score"}, ...], ...]}``, or with ``scores`` False its ``{"result": [[document, ...], ...]}``."""
    if scores:
        return {"result": [[{"document": doc, "score": float(s)} for doc, s in hits] for hits in results]}
    return {"result": [[doc for doc, _ in hits] for hits in results]}
