"""Milvus as a retrieval engine (layer 3): pymilvus's ``MilvusClient``, one collection of passages.

The same code path serves a Milvus server or cluster (``http://host:19530``) and Milvus Lite (a local ``.db`` file:
the 2.5 C++ engine in a child process, ``milvus-lite<3``). The collection (``retrieval.connection.index``) holds the
id (VARCHAR primary key), text (VARCHAR with an analyzer), title, doc id, the embedding (FLOAT_VECTOR, COSINE index)
and a sparse field that Milvus's own BM25 function fills from the text (2.5+), so the dense channel searches the
vectors and the lexical channel ranks by Milvus's BM25. Field names follow ``retrieval.connection.fields`` (the
sparse field is ``sparse`` unless mapped). The token (``user:password`` or an API key) comes from the environment
variable ``credentials_env`` names; ``timeout_s`` bounds every call.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import types
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from workbench.backends.cost import CostCounter
from workbench.backends.retrieval_engines import (
    HIT_FIELDS,
    Connection,
    EngineError,
    ExternalRetriever,
    Hit,
    first_line,
    import_client,
)

MAX_TEXT = 65535
"""Milvus's longest VARCHAR (bytes): the text field's ``max_length``."""

LITE_START_S = 120.0
"""Seconds a Milvus Lite file's server may take to start (the connection's ``timeout_s`` bounds a server's)."""

_LOCK = threading.Lock()


def _import_milvus_lite() -> None:
    """Import milvus-lite 2.5 (when installed) where setuptools ≥ 81 no longer ships ``pkg_resources``, which it
    imports to read its own version: a stand-in with the two names it uses (from ``importlib.metadata``) is in
    ``sys.modules`` only while it imports, so the host process never sees a ``pkg_resources`` it did not have."""
    if "milvus_lite" in sys.modules or importlib.util.find_spec("milvus_lite") is None:
        return
    if importlib.util.find_spec("pkg_resources") is not None:
        importlib.import_module("milvus_lite")
        return

    module = types.ModuleType("pkg_resources")
    module.DistributionNotFound = metadata.PackageNotFoundError  # type: ignore[attr-defined]
    module.get_distribution = lambda name: types.SimpleNamespace(version=metadata.version(name))  # type: ignore[attr-defined]
    sys.modules["pkg_resources"] = module
    try:
        importlib.import_module("milvus_lite")
    finally:
        if sys.modules.get("pkg_resources") is module:
            del sys.modules["pkg_resources"]


def _pymilvus() -> Any:
    _import_milvus_lite()
    return import_client("pymilvus", "milvus")


def is_local(uri: str) -> bool:
    """Whether ``uri`` is a Milvus Lite file rather than a server."""
    return "://" not in uri or uri.startswith("file://")


def open_client(connection: Connection) -> Any:
    """A ``MilvusClient`` for ``connection`` (pymilvus's own errors pass: :func:`connect` words them)."""
    pymilvus = _pymilvus()
    uri = connection.uri.removeprefix("file://")
    secret = connection.secret()
    extra = {"token": secret} if secret is not None else {}
    # a Milvus Lite file starts its server process first: a busy machine takes tens of seconds
    timeout = max(connection.timeout_s, LITE_START_S) if is_local(connection.uri) else connection.timeout_s
    with _LOCK:  # Milvus Lite starts one server per file; two clients starting it at once race
        return pymilvus.MilvusClient(uri=uri, timeout=timeout, **extra)


def connect(connection: Connection) -> Any:
    """:func:`open_client`, a one-line :class:`EngineError` naming the URI when the engine cannot be reached."""
    pymilvus = _pymilvus()
    try:
        return open_client(connection)
    except pymilvus.exceptions.MilvusException as exc:
        raise EngineError(f"cannot connect: {first_line(exc, connection.secret())}", connection.where) from None


def sparse_field(connection: Connection) -> str:
    """The collection's BM25 sparse field."""
    return connection.field_name("sparse")


def collection_fields(client: Any, connection: Connection) -> dict[str, dict[str, Any]] | None:
    """Field name → its description (type, params) of the collection, or None when there is no such collection."""
    if not client.has_collection(connection.index, timeout=connection.timeout_s):
        return None
    described = client.describe_collection(connection.index, timeout=connection.timeout_s)
    return {f["name"]: f for f in described["fields"]}


def check_collection(
    client: Any, connection: Connection, dim: int | None, roles: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """The collection's fields (:func:`collection_fields`) after checking it exists, has a field for every role of
    ``roles``, the BM25 sparse field on the lexical channel, and (``dim``) a vector field of that dimension; a
    one-line :class:`EngineError` naming what fails."""
    found = collection_fields(client, connection)
    if found is None:
        raise EngineError("no such collection: create it with `workbench index`", connection.where)
    wanted = [(role, connection.field_name(role)) for role in roles]
    if connection.channel == "lexical":
        wanted.append(("sparse", sparse_field(connection)))
    missing = [f"{role} → {name}" for role, name in wanted if name not in found]
    if missing:
        raise EngineError(
            f"the field mapping names field(s) the collection lacks: {', '.join(missing)}", connection.where
        )
    if dim is not None:
        params = found[connection.field_name("vector")].get("params", {})
        have = int(params.get("dim", 0) or 0)
        if have != dim:
            raise EngineError(f"the index holds {have}-d vectors, the embedder makes {dim}-d ones", connection.where)
    return found


def collection_count(client: Any, connection: Connection) -> int:
    """Rows in the collection ``connection`` names."""
    found = client.query(connection.index, filter="", output_fields=["count(*)"], timeout=connection.timeout_s)
    return int(found[0]["count(*)"])


class MilvusRetriever(ExternalRetriever):
    """Passages from a Milvus collection: the dense channel by cosine similarity, the lexical channel by Milvus's BM25
    (see the module docstring). Checks at construction that the engine answers and the collection, its mapped fields
    and (dense) the vector dimension match; search errors are retried, then one line."""

    backend = "milvus"  # its entry in ENGINES (the channels it offers)

    def __init__(
        self, passages: Any, connection: Connection, *, embedder: Any = None, counter: CostCounter | None = None
    ) -> None:
        super().__init__(passages, connection, embedder=embedder, counter=counter)
        pymilvus = _pymilvus()
        self.transient = (pymilvus.exceptions.MilvusException, OSError, TimeoutError)
        self._client: Any = None
        dense = connection.channel == "dense"
        roles = ("id", "text", "vector") if dense else ("id", "text")
        dim = embedder.dim if dense else None
        found = self._with_retries("connect", lambda: check_collection(self._connected(), connection, dim, roles))
        # the passage fields the collection holds come back with every hit (ids outside the run's corpus stay usable)
        self._fields = [role for role in HIT_FIELDS if connection.field_name(role) in found]
        self._client.load_collection(connection.index, timeout=connection.timeout_s)

    def _retryable(self, exc: BaseException) -> bool:
        return "auth" not in str(exc).lower() and "permission" not in str(exc).lower()

    def _connected(self) -> Any:
        if self._client is None:
            self._client = open_client(self.connection)
        return self._client

    def _reset(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = None

    def close(self) -> None:
        """Close the client."""
        self._reset()

    def _count(self) -> int:
        return collection_count(self._connected(), self.connection)

    def _engine_search(self, queries: list[str], k: int) -> list[list[Hit]]:
        # one batched request: Milvus searches many queries per call (max_concurrency is the engine's business)
        conn = self.connection
        if conn.channel == "dense":
            data: list[Any] = np.asarray(self.embedder.encode(queries), dtype=np.float32).tolist()
            field, metric = conn.field_name("vector"), "COSINE"
        else:
            data, field, metric = list(queries), sparse_field(conn), "BM25"
        found = self._connected().search(
            conn.index,
            data=data,
            anns_field=field,
            limit=k,
            output_fields=[conn.field_name("id"), *(conn.field_name(role) for role in self._fields)],
            search_params={"metric_type": metric},
            timeout=conn.timeout_s,
        )
        return [[self._hit(hit) for hit in hits] for hits in found]

    def _hit(self, hit: dict[str, Any]) -> Hit:
        entity = hit.get("entity", {})
        fields = {role: entity[self.connection.field_name(role)] for role in self._fields if role in entity}
        return (str(hit["id"]), float(hit["distance"]), fields)


class MilvusIndex:
    """Writes passages into a Milvus collection for ``workbench index``: creates it (fields, COSINE vector index, BM25
    function and sparse index) when missing, upserts by id, counts rows."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        if is_local(connection.uri):  # a new Milvus Lite file: Milvus Lite does not create its folder
            Path(connection.uri.removeprefix("file://")).parent.mkdir(parents=True, exist_ok=True)
        self._client = connect(connection)

    def exists(self) -> bool:
        """Whether the collection exists."""
        return bool(self._client.has_collection(self.connection.index, timeout=self.connection.timeout_s))

    def prepare(self, dim: int) -> None:
        """Create the collection when missing; an existing one is checked instead (its fields, its dimension)."""
        conn = self.connection
        if self.exists():
            check_collection(self._client, conn, dim, ("id", "text", "title", "doc_id", "vector"))
            return
        pymilvus = _pymilvus()
        data_type = pymilvus.DataType
        name = conn.field_name
        schema = self._client.create_schema(auto_id=False)
        schema.add_field(name("id"), data_type.VARCHAR, is_primary=True, max_length=1024)
        schema.add_field(name("text"), data_type.VARCHAR, max_length=MAX_TEXT, enable_analyzer=True)
        schema.add_field(name("title"), data_type.VARCHAR, max_length=4096)
        schema.add_field(name("doc_id"), data_type.VARCHAR, max_length=1024)
        schema.add_field(name("vector"), data_type.FLOAT_VECTOR, dim=int(dim))
        schema.add_field(sparse_field(conn), data_type.SPARSE_FLOAT_VECTOR)
        schema.add_function(
            pymilvus.Function(
                name="bm25",
                function_type=pymilvus.FunctionType.BM25,
                input_field_names=[name("text")],
                output_field_names=[sparse_field(conn)],
            )
        )
        index = self._client.prepare_index_params()
        index.add_index(name("vector"), index_type="AUTOINDEX", metric_type="COSINE")
        index.add_index(sparse_field(conn), index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        self._client.create_collection(conn.index, schema=schema, index_params=index, timeout=conn.timeout_s)

    def present(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` the collection already holds."""
        id_field = self.connection.field_name("id")
        # a filter of JSON string literals: pymilvus's get(ids=...) quotes ids unescaped, so an id holding a quote
        # (a Wikipedia title such as "Hell's Kitchen") breaks the expression
        wanted = json.dumps([str(i) for i in ids], ensure_ascii=False)
        rows = self._client.query(self.connection.index, filter=f"{id_field} in {wanted}", output_fields=[id_field])
        return {str(row[id_field]) for row in rows}

    def write(self, rows: Sequence[dict[str, Any]], vectors: np.ndarray) -> None:
        """Write ``rows`` (chunk_id, text, title, doc_id) with their ``vectors`` — ids the collection does not hold
        (:meth:`present` picked them). An insert: Milvus Lite 2.5's upsert fails on an id holding a quote."""
        name = self.connection.field_name
        data = [
            {
                name("id"): row["chunk_id"],
                name("text"): row["text"],
                name("title"): row["title"],
                name("doc_id"): row["doc_id"],
                name("vector"): [float(x) for x in vec],
            }
            for row, vec in zip(rows, vectors, strict=True)
        ]
        self._client.insert(self.connection.index, data, timeout=self.connection.timeout_s)

    def count(self) -> int:
        """Rows in the collection."""
        return collection_count(self._client, self.connection)

    def sample(self, n: int) -> list[dict[str, str]]:
        """Up to ``n`` rows as ``{id, text}``, read through the field mapping."""
        name = self.connection.field_name
        rows = self._client.query(self.connection.index, filter="", output_fields=[name("id"), name("text")], limit=n)
        return [{"id": str(row[name("id")]), "text": str(row[name("text")])} for row in rows]

    def close(self) -> None:
        """Close the client."""
        self._client.close()
