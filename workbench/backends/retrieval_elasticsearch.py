"""Elasticsearch as a retrieval engine (layer 3), and what it shares with OpenSearch
(:mod:`workbench.backends.retrieval_opensearch`): one index of passages searched through the official client.

The lexical channel is a BM25 ``match`` query on the text field (the engine's own analyser and similarity: BM25,
k1 1.2, b 0.75 unless the index says otherwise); the dense channel a kNN search on the vector field (Elasticsearch
8+: the ``knn`` search option; OpenSearch: the k-NN plugin's ``knn`` query). A passage's id is the document ``_id``
unless ``retrieval.connection.fields.id`` names a source field; hits carry the ``_source`` text and title.

The two engines differ in a few request shapes, gathered in a :class:`Dialect`; the retriever
(:class:`SearchEngineRetriever`) and the writer of ``workbench index`` (:class:`SearchEngineIndex`) are shared.
Credentials come from the variable ``credentials_env`` names: ``user:password`` is sent as HTTP basic auth, any
other value as an Elasticsearch API key (the encoded form, ``Authorization: ApiKey ...``) or, to OpenSearch, as a
bearer token. The client's own retries are off: a failed search is retried by
:meth:`~workbench.backends.retrieval_engines.ExternalRetriever._with_retries` (connection errors, timeouts and the
busy answers 429 / 502 / 503 / 504; any other answer of the engine, such as 401 or 404, is one line at once).
Errors name the exception type and HTTP status, never the engine's message (it may quote the request).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from workbench.backends.cost import CostCounter
from workbench.backends.retrieval_engines import (
    Connection,
    EngineError,
    ExternalRetriever,
    first_line,
    import_client,
)

T = TypeVar("T")

TEXT_TYPES = frozenset({"text", "match_only_text"})
"""Field types a BM25 ``match`` query ranks."""

BUSY_STATUSES = frozenset({429, 502, 503, 504})
"""Answers of an engine that is overloaded or restarting: a search is retried as after a dropped connection."""


class EngineBusy(Exception):
    """A search answered with one of :data:`BUSY_STATUSES` (message: the error type and status); retried."""


class Dialect:
    """How one engine's official client is called; this class speaks Elasticsearch 8+ (``elasticsearch`` client),
    :class:`~workbench.backends.retrieval_opensearch.OpenSearchDialect` OpenSearch 2+."""

    backend = "elasticsearch"
    module = "elasticsearch"
    vector_type = "dense_vector"
    dim_key = "dims"

    def client_module(self) -> Any:
        """The client package (a one-line error naming the extra when absent)."""
        return import_client(self.module, self.backend)

    def helpers(self) -> Any:
        """The client's ``helpers`` module (``bulk``)."""
        return import_client(f"{self.module}.helpers", self.backend)

    def errors(self) -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
        """``(transient, answered)``: connection errors and timeouts (retried), and the engine's error answers."""
        es = self.client_module()
        return (es.TransportError,), (es.ApiError, self.helpers().BulkIndexError)

    def client(self, connection: Connection) -> Any:
        """A client for ``connection.uri`` with its timeout, no client-side retries, and the credential."""
        es = self.client_module()
        secret = connection.secret()
        auth: dict[str, Any] = {}
        if secret is not None:
            auth = {"basic_auth": tuple(secret.split(":", 1))} if ":" in secret else {"api_key": secret}
        return es.Elasticsearch(
            connection.uri, request_timeout=connection.timeout_s, max_retries=0, retry_on_timeout=False, **auth
        )

    def search(self, client: Any, index: str, body: dict[str, Any]) -> dict[str, Any]:
        """The ``_search`` answer for ``body`` (query / knn, size, _source)."""
        params = {("source" if key == "_source" else key): value for key, value in body.items()}
        return plain(client.search(index=index, **params))

    def knn(self, field: str, vector: Sequence[float], k: int) -> dict[str, Any]:
        """The request body of a top-``k`` vector search on ``field``."""
        return {"knn": {"field": field, "query_vector": list(vector), "k": k, "num_candidates": max(100, k)}, "size": k}

    def vector_mapping(self, dim: int) -> dict[str, Any]:
        """The mapping of a ``dim``-d vector field searched by cosine similarity."""
        return {"type": "dense_vector", "dims": dim, "index": True, "similarity": "cosine"}

    def create(self, client: Any, index: str, properties: dict[str, Any]) -> None:
        """Create ``index`` with ``properties``."""
        client.indices.create(index=index, mappings={"properties": properties})


def plain(response: Any) -> Any:
    """A client's response as plain Python data (the Elasticsearch client wraps it in an ``ObjectApiResponse``)."""
    return getattr(response, "body", response)


def describe(exc: BaseException) -> str:
    """An engine error answer as its type and HTTP status (its message may quote the request: left out)."""
    status = getattr(exc, "status_code", None)
    return f"{type(exc).__name__} (HTTP {status})" if isinstance(status, int) else type(exc).__name__


def field_mapping(properties: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The mapping of field ``name`` (dotted for object fields) in an index's ``properties``, or None."""
    node: Any = {"properties": properties}
    for part in name.split("."):
        node = (node.get("properties") or {}).get(part) if isinstance(node, dict) else None
        if node is None:
            return None
    return node


def id_field(connection: Connection) -> str | None:
    """The source field holding the passage id, or None: the document ``_id``."""
    return connection.fields.get("id")


def check_mapping(client: Any, dialect: Dialect, connection: Connection, dim: int | None) -> dict[str, Any]:
    """The index's field mapping after checking the index exists, maps the text field as text, the id field (when
    one is named) and, when ``dim`` is given, a vector field of that dimension; one-line :class:`EngineError`s (a
    connection error or timeout passes, for the caller to retry or word)."""
    transient, answered = dialect.errors()
    try:
        found = plain(client.indices.get_mapping(index=connection.index))
    except transient:
        raise
    except answered as exc:
        if getattr(exc, "status_code", None) == 404:
            raise EngineError("no such index: create it with `workbench index`", connection.where) from None
        raise EngineError(f"reading the mapping failed: {describe(exc)}", connection.where) from None
    properties = next(iter(found.values()), {}).get("mappings", {}).get("properties", {}) if found else {}
    problems = []
    text = field_mapping(properties, connection.field_name("text"))
    if text is None or text.get("type") not in TEXT_TYPES:
        problems.append(f"text → {connection.field_name('text')} (a text field)")
    pid = id_field(connection)
    if pid is not None and field_mapping(properties, pid) is None:
        problems.append(f"id → {pid}")
    if problems:
        raise EngineError(f"the field mapping names field(s) the index lacks: {', '.join(problems)}", connection.where)
    if dim is not None:
        vector = field_mapping(properties, connection.field_name("vector"))
        if vector is None or vector.get("type") != dialect.vector_type:
            raise EngineError(
                f"field {connection.field_name('vector')!r} is not a {dialect.vector_type} field", connection.where
            )
        if vector.get(dialect.dim_key) != dim:
            raise EngineError(
                f"the index holds {vector.get(dialect.dim_key)}-d vectors, the embedder makes {dim}-d ones",
                connection.where,
            )
    return properties


def hit_fields(hit: dict[str, Any], connection: Connection) -> tuple[str, dict[str, str]]:
    """A search hit's passage id and its ``text`` / ``title`` / ``doc_id`` read from ``_source`` through the mapping."""
    source = hit.get("_source") or {}
    pid = id_field(connection)
    passage = str(source.get(pid, hit["_id"])) if pid is not None else str(hit["_id"])
    fields = {
        role: str(source[connection.field_name(role)])
        for role in ("text", "title", "doc_id")
        if source.get(connection.field_name(role)) is not None
    }
    return passage, fields


class SearchEngineRetriever(ExternalRetriever):
    """Passages from an Elasticsearch / OpenSearch index (:attr:`dialect`): BM25 ``match`` on the lexical channel,
    kNN on the dense one (see the module docstring). Checks at construction that the engine answers and the index,
    its mapped fields and (dense) the vector dimension match."""

    dialect: Dialect = Dialect()

    def __init__(
        self, passages: Any, connection: Connection, *, embedder: Any = None, counter: CostCounter | None = None
    ) -> None:
        super().__init__(passages, connection, embedder=embedder, counter=counter)
        transient, self.failures = self.dialect.errors()
        self.transient = (*transient, EngineBusy)
        self._client = self.dialect.client(connection)
        dim = embedder.dim if connection.channel == "dense" else None
        self._with_retries("connect", lambda: check_mapping(self._client, self.dialect, connection, dim))
        roles = ("text", "title", "doc_id")
        self._source = [connection.field_name(role) for role in roles] + [f for f in [id_field(connection)] if f]

    def _search_one(self, query: str, vector: np.ndarray | None, k: int) -> list[tuple[str, float, dict[str, str]]]:
        conn = self.connection
        if vector is not None:
            body = self.dialect.knn(conn.field_name("vector"), [float(x) for x in vector], k)
        else:
            body = {"query": {"match": {conn.field_name("text"): query}}, "size": k}
        body["_source"] = self._source
        answer = self._request(
            f"{conn.channel} search", lambda: self.dialect.search(self._client, str(conn.index), body)
        )
        hits = []
        for hit in answer["hits"]["hits"]:
            passage, fields = hit_fields(hit, conn)
            hits.append((passage, float(hit["_score"]), fields))
        return hits

    def _count(self) -> int:
        index = str(self.connection.index)
        return int(plain(self._request("count", lambda: self._client.count(index=index)))["count"])

    def _request(self, what: str, call: Callable[[], T]) -> T:
        """``call()`` with the engine's answers sorted: a busy one (:data:`BUSY_STATUSES`) becomes
        :class:`EngineBusy` (retried by :meth:`_with_retries`), any other refusal a one-line :class:`EngineError`."""
        try:
            return call()
        except self.transient:
            raise
        except self.failures as exc:
            if getattr(exc, "status_code", None) in BUSY_STATUSES:
                raise EngineBusy(describe(exc)) from None
            raise EngineError(f"{what} failed: {describe(exc)}", self.connection.where) from None

    def close(self) -> None:
        """Close the client's connections."""
        self._client.close()


class SearchEngineIndex:
    """Writes passages into an Elasticsearch / OpenSearch index for ``workbench index``: creates the index (text
    fields, a keyword doc id, a cosine vector field of the embedder's dimension) when missing, writes with the
    client's bulk helper under ``_id`` = the chunk id (a re-run overwrites a document, never duplicates it) and
    refreshes, so the final ``_count`` sees every write."""

    dialect: Dialect = Dialect()
    needs_vectors = True

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._transient, self._answered = self.dialect.errors()
        self._client = self.dialect.client(connection)
        self._index = str(connection.index)

    def _call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except self._transient as exc:
            detail = first_line(exc, self.connection.secret())
            raise EngineError(f"{what} failed: {detail}", self.connection.where) from None
        except self._answered as exc:
            raise EngineError(f"{what} failed: {describe(exc)}", self.connection.where) from None

    def exists(self) -> bool:
        """Whether the index exists."""
        return bool(self._call("checking the index", lambda: self._client.indices.exists(index=self._index)))

    def prepare(self, dim: int | None) -> None:
        """Create the index when missing; an existing one is checked (its mapped fields, its vector dimension)."""
        if self.exists():
            self._call("reading the mapping", lambda: self._check(dim))
            return
        conn = self.connection
        properties: dict[str, Any] = {
            conn.field_name("text"): {"type": "text"},
            conn.field_name("title"): {"type": "text"},
            conn.field_name("doc_id"): {"type": "keyword"},
        }
        if id_field(conn) is not None:
            properties[str(id_field(conn))] = {"type": "keyword"}
        if dim is not None:
            properties[conn.field_name("vector")] = self.dialect.vector_mapping(int(dim))
        self._call("creating the index", lambda: self.dialect.create(self._client, self._index, properties))

    def _check(self, dim: int | None) -> None:
        check_mapping(self._client, self.dialect, self.connection, dim)

    def present(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` the index holds."""
        pid = id_field(self.connection)
        query = {"ids": {"values": list(ids)}} if pid is None else {"terms": {pid: list(ids)}}
        body = {"query": query, "size": len(ids), "_source": [pid] if pid else False}
        answer = self._call("reading ids", lambda: self.dialect.search(self._client, self._index, body))
        return {hit_fields(hit, self.connection)[0] for hit in answer["hits"]["hits"]}

    def write(self, rows: Sequence[dict[str, Any]], vectors: np.ndarray) -> None:
        """Bulk-index ``rows`` (chunk_id, text, title, doc_id) with their ``vectors`` under ``_id`` = chunk id, then
        refresh."""
        conn = self.connection
        actions = []
        for i, row in enumerate(rows):
            source = {conn.field_name(role): row[role] for role in ("text", "title", "doc_id")}
            if id_field(conn) is not None:
                source[str(id_field(conn))] = row["chunk_id"]
            if vectors.shape[1:] and vectors.shape[1] > 0:
                source[conn.field_name("vector")] = [float(x) for x in vectors[i]]
            actions.append({"_op_type": "index", "_index": self._index, "_id": row["chunk_id"], "_source": source})
        bulk = self.dialect.helpers().bulk
        self._call("bulk indexing", lambda: bulk(self._client, actions, refresh=True))

    def count(self) -> int:
        """Documents in the index (``_count`` after a refresh)."""
        self._call("refreshing", lambda: self._client.indices.refresh(index=self._index))
        return int(self._call("counting", lambda: plain(self._client.count(index=self._index)))["count"])

    def sample(self, n: int) -> list[dict[str, str]]:
        """Up to ``n`` documents as ``{"id", "text"}``, read through the field mapping."""
        conn = self.connection
        body = {
            "query": {"match_all": {}},
            "size": n,
            "_source": [conn.field_name("text")] + [f for f in [id_field(conn)] if f],
        }
        answer = self._call("sampling", lambda: self.dialect.search(self._client, self._index, body))
        rows = []
        for hit in answer["hits"]["hits"]:
            passage, fields = hit_fields(hit, conn)
            rows.append({"id": passage, "text": fields.get("text", "")})
        return rows

    def close(self) -> None:
        """Close the client's connections."""
        self._client.close()


class ElasticsearchRetriever(SearchEngineRetriever):
    """:class:`SearchEngineRetriever` over Elasticsearch 8+."""


class ElasticsearchIndex(SearchEngineIndex):
    """:class:`SearchEngineIndex` into Elasticsearch 8+."""
