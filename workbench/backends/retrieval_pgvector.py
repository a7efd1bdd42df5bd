"""PostgreSQL + pgvector as a retrieval engine (layer 3): psycopg 3, one table of passages.

The table (``retrieval.connection.index``) holds one row per passage: the id (primary key), text, title, doc id and
the embedding as a pgvector ``vector(dim)``. The dense channel ranks by cosine distance (``<=>``, an HNSW index
``vector_cosine_ops`` when ``workbench index`` made the table; score = cosine similarity); the lexical channel by
PostgreSQL full-text search, ``ts_rank_cd`` of ``to_tsvector('english', text)`` against the question's words joined
by OR (a GIN index on that expression when ``workbench index`` made the table; an adopted table without one is
scanned). Column names follow ``retrieval.connection.fields``; every name goes through ``psycopg.sql.Identifier``.

Connections: one per worker thread (``max_concurrency`` queries in flight), each with ``connect_timeout`` and a
``statement_timeout`` of ``timeout_s``; the password comes from the environment variable ``credentials_env`` names.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
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

TEXT_SEARCH_CONFIG = "english"
"""The PostgreSQL text-search configuration of the lexical channel (stemming and stop words)."""


def _psycopg() -> Any:
    return import_client("psycopg", "pgvector")


def open_connection(connection: Connection) -> Any:
    """An autocommit psycopg connection to ``connection.uri`` with the timeouts and credential it names (psycopg's
    own errors pass: :func:`connect` words them)."""
    psycopg = _psycopg()
    secret = connection.secret()
    extra = {"password": secret} if secret is not None else {}
    return psycopg.connect(
        connection.uri,
        autocommit=True,
        connect_timeout=max(1, math.ceil(connection.timeout_s)),
        options=f"-c statement_timeout={int(connection.timeout_s * 1000)}",
        **extra,
    )


def connect(connection: Connection) -> Any:
    """:func:`open_connection`, a one-line :class:`EngineError` naming the URI (without credentials) when the server
    is unreachable or refuses it."""
    psycopg = _psycopg()
    try:
        return open_connection(connection)
    except psycopg.Error as exc:
        raise EngineError(f"cannot connect: {first_line(exc, connection.secret())}", connection.where) from None


def refused_credentials(exc: BaseException) -> bool:
    """Whether a connection error is the server refusing the credentials (not worth retrying)."""
    return "authentication failed" in str(exc) or getattr(exc, "sqlstate", None) in ("28000", "28P01")


def vector_literal(vector: Sequence[float]) -> str:
    """A pgvector text literal, ``[0.1,0.2,...]`` (cast with ``::vector`` in the query)."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def table_columns(conn: Any, table: str) -> dict[str, Any] | None:
    """Column name → pgvector dimension (an int for a ``vector(n)`` column, None for any other type) of ``table``
    (a name, optionally schema-qualified), or None when no such table is visible."""
    regclass = conn.execute("SELECT to_regclass(%s)::oid", (table,)).fetchone()[0]
    if regclass is None:
        return None
    rows = conn.execute(
        "SELECT a.attname, t.typname, a.atttypmod FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid"
        " WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped",
        (regclass,),
    ).fetchall()
    return {name: (typmod if typname == "vector" and typmod > 0 else None) for name, typname, typmod in rows}


def check_table(conn: Any, connection: Connection, dim: int | None, roles: Sequence[str]) -> dict[str, Any]:
    """The table's columns after checking the table exists, has a column for every role of ``roles`` and, when
    ``dim`` is given, a vector column of that dimension; a one-line :class:`EngineError` naming what is missing."""
    columns = table_columns(conn, connection.index)
    if columns is None:
        raise EngineError("no such table: create it with `workbench index`", connection.where)
    missing = [
        f"{role} → {connection.field_name(role)}" for role in roles if connection.field_name(role) not in columns
    ]
    if missing:
        raise EngineError(f"the field mapping names column(s) the table lacks: {', '.join(missing)}", connection.where)
    if dim is not None:
        found = columns[connection.field_name("vector")]
        if found is None:
            raise EngineError(
                f"column {connection.field_name('vector')!r} is not a pgvector vector(n)", connection.where
            )
        if found != dim:
            raise EngineError(f"the index holds {found}-d vectors, the embedder makes {dim}-d ones", connection.where)
    return columns


class PgvectorRetriever(ExternalRetriever):
    """Passages from a PostgreSQL table with pgvector: the dense channel by cosine distance, the lexical channel by
    full-text rank (see the module docstring). Checks at construction that the server answers and the table, its
    mapped columns and (dense) the vector dimension match; search errors are retried, then one line."""

    backend = "pgvector"  # its entry in ENGINES (the channels it offers)

    def __init__(
        self, passages: Any, connection: Connection, *, embedder: Any = None, counter: CostCounter | None = None
    ) -> None:
        super().__init__(passages, connection, embedder=embedder, counter=counter)
        psycopg = _psycopg()
        self.transient = (psycopg.OperationalError, psycopg.InterfaceError)
        self.failures = (psycopg.Error,)
        self._local = threading.local()
        self._open: list[Any] = []
        self._lock = threading.Lock()
        dense = connection.channel == "dense"
        roles = ("id", "text", "vector") if dense else ("id", "text")
        dim = embedder.dim if dense else None
        columns = self._with_retries("connect", lambda: check_table(self._conn(), connection, dim, roles))
        # the passage fields the table holds come back with every hit (ids outside the run's corpus stay usable)
        self._fields = [role for role in HIT_FIELDS if connection.field_name(role) in columns]
        self._query = self._build_query()

    def _retryable(self, exc: BaseException) -> bool:
        return not refused_credentials(exc)

    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = open_connection(self.connection)
            self._local.conn = conn
            with self._lock:
                self._open.append(conn)
        return conn

    def _reset(self) -> None:
        with self._lock:
            for conn in self._open:
                conn.close()
            self._open.clear()

    def close(self) -> None:
        """Close every connection this retriever opened."""
        self._reset()

    def _build_query(self) -> Any:
        from psycopg import sql

        conn = self.connection
        table = sql.Identifier(*conn.index.split(".", 1))
        pid, text = sql.Identifier(conn.field_name("id")), sql.Identifier(conn.field_name("text"))
        fields = sql.SQL("").join(
            sql.SQL(", {}::text").format(sql.Identifier(conn.field_name(role))) for role in self._fields
        )
        if conn.channel == "dense":
            vector = sql.Identifier(conn.field_name("vector"))
            return sql.SQL(
                "SELECT {pid}::text, 1 - ({vector} <=> %(q)s::vector){fields} FROM {table}"
                " ORDER BY {vector} <=> %(q)s::vector LIMIT %(k)s"
            ).format(pid=pid, vector=vector, fields=fields, table=table)
        config = sql.Literal(TEXT_SEARCH_CONFIG)
        return sql.SQL(
            "SELECT {pid}::text, ts_rank_cd(to_tsvector({config}, {text}), q) AS score{fields} FROM {table},"
            " to_tsquery({config}, replace(plainto_tsquery({config}, %(q)s)::text, '&', '|')) q"
            " WHERE to_tsvector({config}, {text}) @@ q ORDER BY score DESC, {pid} LIMIT %(k)s"
        ).format(pid=pid, text=text, fields=fields, table=table, config=config)

    def _count(self) -> int:
        from psycopg import sql

        table = sql.Identifier(*self.connection.index.split(".", 1))
        return int(self._conn().execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()[0])

    def _search_one(self, query: str, vector: np.ndarray | None, k: int) -> list[Hit]:
        q = vector_literal(vector) if vector is not None else query
        rows = self._conn().execute(self._query, {"q": q, "k": k}).fetchall()
        return [(str(row[0]), float(row[1]), dict(zip(self._fields, row[2:], strict=True))) for row in rows]


class PgvectorIndex:
    """Writes passages into a pgvector table for ``workbench index``: creates the table (id primary key, text, title,
    doc id, ``vector(dim)``) with its HNSW (cosine) and full-text GIN indexes when missing, upserts by id (a re-run
    rewrites a row in place, never duplicates it), and counts rows."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._conn = connect(connection)

    def _names(self) -> dict[str, Any]:
        from psycopg import sql

        conn = self.connection
        names = {role: sql.Identifier(conn.field_name(role)) for role in ("id", "text", "title", "doc_id", "vector")}
        names["table"] = sql.Identifier(*conn.index.split(".", 1))
        return names

    def exists(self) -> bool:
        """Whether the table exists."""
        return table_columns(self._conn, self.connection.index) is not None

    def prepare(self, dim: int) -> None:
        """Create the extension, the table and its indexes when missing; an existing table is checked instead (its
        mapped columns, its vector dimension ``dim``)."""
        from psycopg import sql

        if self.exists():
            check_table(self._conn, self.connection, dim, ("id", "text", "title", "doc_id", "vector"))
            return
        names = self._names()
        stem = self.connection.index.replace(".", "_")
        statements = [
            sql.SQL("CREATE EXTENSION IF NOT EXISTS vector"),
            sql.SQL(
                "CREATE TABLE {table} ({id} text PRIMARY KEY, {text} text NOT NULL, {title} text, {doc_id} text,"
                " {vector} vector({dim}))"
            ).format(dim=sql.Literal(int(dim)), **names),
            sql.SQL("CREATE INDEX {name} ON {table} USING hnsw ({vector} vector_cosine_ops)").format(
                name=sql.Identifier(f"{stem}_hnsw"), **names
            ),
            sql.SQL("CREATE INDEX {name} ON {table} USING gin (to_tsvector({config}, {text}))").format(
                name=sql.Identifier(f"{stem}_fts"), config=sql.Literal(TEXT_SEARCH_CONFIG), **names
            ),
        ]
        with self._conn.transaction():
            for statement in statements:
                self._conn.execute(statement)

    def present(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` the table already holds."""
        from psycopg import sql

        query = sql.SQL("SELECT {id} FROM {table} WHERE {id} = ANY(%s)").format(**self._names())
        return {str(row[0]) for row in self._conn.execute(query, (list(ids),)).fetchall()}

    def write(self, rows: Sequence[dict[str, Any]], vectors: np.ndarray) -> None:
        """Upsert ``rows`` (chunk_id, text, title, doc_id) with their ``vectors`` in one transaction."""
        from psycopg import sql

        query = sql.SQL(
            "INSERT INTO {table} ({id}, {text}, {title}, {doc_id}, {vector}) VALUES (%s, %s, %s, %s, %s::vector)"
            " ON CONFLICT ({id}) DO UPDATE SET {text} = EXCLUDED.{text}, {title} = EXCLUDED.{title},"
            " {doc_id} = EXCLUDED.{doc_id}, {vector} = EXCLUDED.{vector}"
        ).format(**self._names())
        params = [
            (row["chunk_id"], row["text"], row["title"], row["doc_id"], vector_literal(vec))
            for row, vec in zip(rows, vectors, strict=True)
        ]
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.executemany(query, params)

    def count(self) -> int:
        """Rows in the table."""
        from psycopg import sql

        return int(self._conn.execute(sql.SQL("SELECT count(*) FROM {table}").format(**self._names())).fetchone()[0])

    def sample(self, n: int) -> list[dict[str, str]]:
        """Up to ``n`` rows as ``{role: value}`` (id, text), read through the field mapping."""
        from psycopg import sql

        query = sql.SQL("SELECT {id}::text, {text} FROM {table} LIMIT %s").format(**self._names())
        return [{"id": pid, "text": text} for pid, text in self._conn.execute(query, (n,)).fetchall()]

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()
