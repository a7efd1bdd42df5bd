"""The retrieval engines a recipe can name (``retrieval.backend``), what each can do, and what they share (layer 3).

In-process backends (``bm25``, ``dense``, ``hybrid``: :mod:`workbench.backends.retrievers`) build their index over
the run's corpus in this process. External backends search the user's engine through ``retrieval.connection``:
``pgvector`` (PostgreSQL + pgvector, :mod:`workbench.backends.retrieval_pgvector`), ``milvus``
(:mod:`workbench.backends.retrieval_milvus`) and ``http`` (a ``POST /retrieve`` server such as ``workbench
serve-retriever`` or a FlashRAG / Search-R1 retriever server, :mod:`workbench.backends.retrieval_http`).
:data:`ENGINES` declares each backend's channels (``dense``: vector search; ``lexical``: the engine's full-text
ranking) so a recipe asking for a channel a backend lacks is refused when it loads (:func:`check_channel`).

Every external backend is an :class:`ExternalRetriever`: it searches with a bounded number of tries and exponential
backoff (:meth:`ExternalRetriever._with_retries`), maps the engine's ids onto rows of its
:class:`~workbench.backends.passage_table.PassageTable` (the run's corpus, grown by the passages the engine returns
with their text that the corpus lacks: a production index, a served retriever), and counts calls and latency in the
run's :class:`~workbench.backends.cost.CostCounter` as the in-process retrievers do. Its errors are one line naming the
engine's URI without credentials (:func:`redact_uri`) and what failed; the credential itself is read from the
environment variable the recipe names and is never written anywhere.
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote_plus, urlsplit, urlunsplit

import numpy as np

from workbench.backends.cost import CostCounter
from workbench.backends.passage_table import PassageTable
from workbench.backends.retrievers import Corpus, RetrievalResult, Retriever
from workbench.core.errors import ConfigError, WorkbenchError

log = logging.getLogger(__name__)

T = TypeVar("T")

Hit = tuple[str, float] | tuple[str, float, dict[str, Any]]
"""One hit of an engine: ``(engine id, score)``, or ``(engine id, score, fields)`` where ``fields`` holds any of
``text``, ``title``, ``doc_id`` the engine returned with it (:data:`HIT_FIELDS`)."""

HIT_FIELDS: tuple[str, ...] = ("text", "title", "doc_id")
"""The passage fields an engine may return with a hit."""

CHANNELS: tuple[str, ...] = ("dense", "lexical")
"""The retrieval channels an engine may offer: vector search over embeddings, and its full-text (BM25-like) ranking."""


@dataclass(frozen=True)
class EngineSpec:
    """What a ``retrieval.backend`` is: ``external`` (the user's engine, reached through ``retrieval.connection``)
    or in-process, the ``channels`` it can search, and the URI schemes it accepts (external only)."""

    name: str
    external: bool
    channels: frozenset[str]
    schemes: tuple[str, ...] = ()
    needs_index: bool = True
    """Whether ``retrieval.connection.index`` must name a table / collection / index (lucene's URI is the index
    directory; a retriever server serves one index of its own)."""


ENGINES: dict[str, EngineSpec] = {
    "bm25": EngineSpec("bm25", False, frozenset({"lexical"})),
    "dense": EngineSpec("dense", False, frozenset({"dense"})),
    "hybrid": EngineSpec("hybrid", False, frozenset({"dense", "lexical"})),
    "pgvector": EngineSpec("pgvector", True, frozenset({"dense", "lexical"}), ("postgresql", "postgres")),
    # Milvus 2.5 (Lite and server) has BM25 full-text search on a VARCHAR field with an analyzer
    "milvus": EngineSpec("milvus", True, frozenset({"dense", "lexical"}), ("http", "https", "tcp", "grpc", "file")),
    # a retriever server searches whatever it serves: the recipe's channel is a declaration, recorded and checked
    # against `workbench serve-retriever`'s /health (another server's cannot be checked)
    "http": EngineSpec("http", True, frozenset({"dense", "lexical"}), ("http", "https"), needs_index=False),
    # a Lucene index directory searched with Anserini's BM25 (pyserini's jar): the IR-research reference lexical ranking
    "lucene": EngineSpec("lucene", True, frozenset({"lexical"}), ("file",), needs_index=False),
    "elasticsearch": EngineSpec("elasticsearch", True, frozenset({"dense", "lexical"}), ("http", "https")),
    "opensearch": EngineSpec("opensearch", True, frozenset({"dense", "lexical"}), ("http", "https")),
}
"""Every retrieval backend and its capabilities; a new engine is one entry here and one module."""

BACKENDS: tuple[str, ...] = tuple(ENGINES)

FIELD_ROLES: tuple[str, ...] = ("id", "text", "title", "doc_id", "vector", "sparse")
"""The roles ``retrieval.connection.fields`` maps onto an engine's columns / fields (``sparse``: Milvus's BM25
field)."""

DEFAULT_FIELDS: dict[str, str] = {role: role for role in FIELD_ROLES}
"""Each role's column / field name when ``retrieval.connection.fields`` does not name it."""


def check_channel(backend: str, channel: str, key: str = "retrieval.connection.channel") -> None:
    """Refuse (a one-line ConfigError naming ``key``) a channel ``backend`` does not offer."""
    spec = ENGINES.get(backend)
    if spec is None:
        raise ConfigError(f"unknown retrieval backend {backend!r} (known: {', '.join(BACKENDS)})", "retrieval.backend")
    if channel not in spec.channels:
        raise ConfigError(
            f"backend {backend} has no {channel} channel (it offers {', '.join(sorted(spec.channels))})", key
        )


def check_fields(fields: dict[str, str], key: str) -> None:
    """Refuse (a one-line ConfigError naming ``key``) a field mapping naming an unknown role or an empty column."""
    for role, column in fields.items():
        if role not in FIELD_ROLES:
            raise ConfigError(f"unknown role {role!r} (roles: {', '.join(FIELD_ROLES)})", key)
        if not isinstance(column, str) or not column.strip():
            raise ConfigError(f"role {role} must name a column / field", f"{key}.{role}")


# --------------------------------------------------------------------------------------------------- connection


@dataclass(frozen=True)
class Connection:
    """Where and how to reach an engine (the ``retrieval.connection`` section as plain values).

    ``uri``: the engine's address (a PostgreSQL URL, a Milvus server URL or a Milvus Lite file); ``index``: the
    table / collection; ``fields``: role → the engine's column (:data:`FIELD_ROLES`, defaults :data:`DEFAULT_FIELDS`);
    ``credentials_env``: the NAME of the environment variable holding the password / token (None: none);
    ``timeout_s`` bounds one request; ``retries`` more tries follow a failed one after ``backoff_s`` · 2^attempt
    seconds; ``max_concurrency`` requests in flight; ``channel`` the channel searched; ``batch_size`` rows per
    write when indexing."""

    uri: str
    index: str | None
    fields: dict[str, str] = field(default_factory=dict)
    credentials_env: str | None = None
    timeout_s: float = 10.0
    retries: int = 2
    backoff_s: float = 0.5
    max_concurrency: int = 4
    channel: str = "dense"
    batch_size: int = 256

    def field_name(self, role: str) -> str:
        """The engine's column / field for ``role``."""
        return self.fields.get(role, DEFAULT_FIELDS[role])

    @property
    def where(self) -> str:
        """How errors name the engine: the URI without credentials, and the index (when the engine has one)."""
        return f"{redact_uri(self.uri)} ({self.index})" if self.index else redact_uri(self.uri)

    def secret(self) -> str | None:
        """The credential from the environment variable :attr:`credentials_env` names (None when it names none); an
        unset variable is a one-line error naming the variable, never its value."""
        if not self.credentials_env:
            return None
        value = os.environ.get(self.credentials_env)
        if value is None:
            raise EngineError(
                f"environment variable {self.credentials_env} (retrieval.connection) is not set", self.where
            )
        return value


def redact_uri(uri: str) -> str:
    """``uri`` without a password or token in its user-info part (``postgresql://u:secret@h/db`` →
    ``postgresql://u:***@h/db``) and without its query string (drivers accept passwords there too)."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "<malformed uri>"
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        name = user.split(":", 1)[0]
        netloc = f"{name}:***@{host}" if ":" in user else f"{name}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


SECRET_PARAMS: tuple[str, ...] = ("pass", "pwd", "token", "secret", "key", "auth", "cred")
"""Query parameters whose name holds one of these (case-insensitive) may carry a secret: :func:`public_uri` drops
them."""


def public_uri(uri: str) -> str:
    """``uri`` as a bundle may record it: without a password or token in its user-info part (the user name kept,
    ``postgresql://u:secret@h/db`` → ``postgresql://u@h/db``) and without query parameters that may carry one
    (:data:`SECRET_PARAMS`), the others kept (``?host=/run/postgresql`` still reaches a UNIX socket). A path (a Milvus
    Lite file) is kept as it is. The credential comes back from ``credentials_env`` at load."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        raise EngineError("the engine's URI is malformed", "retrieval.connection.uri") from None
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.split(':', 1)[0]}@{host}"
    kept = [  # the pairs as written (a re-encoded ?host=/dir would still work, but no longer reads as the recipe's)
        pair
        for pair in parts.query.split("&")
        if pair and not any(word in unquote_plus(pair.split("=", 1)[0]).lower() for word in SECRET_PARAMS)
    ]
    return urlunsplit((parts.scheme, netloc, parts.path, "&".join(kept), ""))


class EngineError(WorkbenchError):
    """An engine cannot be used: unreachable, refused the credentials, lacks the index, fields or dimension the
    recipe expects, or timed out. One line: ``<uri> (<index>): <what failed>``."""


def import_client(module: str, backend: str) -> Any:
    """The engine client ``module`` for ``backend``; a one-line :class:`EngineError` naming the extra to install
    when it is absent."""

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError:
        raise EngineError(
            f"backend {backend} needs {module}: pip install 'workbench[engines]'", "retrieval.backend"
        ) from None


def scrub(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced (a driver's message may quote what it was given)."""
    return text.replace(secret, "***") if secret else text


def first_line(exc: BaseException, secret: str | None = None) -> str:
    """``ExceptionType: first line of its message``, credentials scrubbed."""
    lines = str(exc).strip().splitlines()
    return scrub(f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__, secret)


# --------------------------------------------------------------------------------------------------- base


class ExternalRetriever(Retriever):
    """A :class:`~workbench.backends.retrievers.Retriever` over the user's engine.

    Subclasses implement ``_search_one(query, vector, k) -> [hit, ...]`` (best first; a :data:`Hit` is
    ``(engine id, score)`` or ``(engine id, score, fields)`` with the passage's ``text`` / ``title`` / ``doc_id``
    when the engine holds them; ``vector`` is the query's embedding by ``embedder`` on the dense channel) and name
    their ``transient`` exception types (a dropped connection, a timeout: retried) and their other ``failures`` (a
    missing table: one line at once). Results carry the engine's ids and scores, ranks 1..n, and rows of
    :attr:`passages`, a :class:`~workbench.backends.passage_table.PassageTable` over ``passages`` (the run's
    corpus; None: empty, every passage comes from the engine): an id the table lacks is appended with the fields
    the engine returned; an id it lacks returned without text is a one-line :class:`EngineError` (the engine holds
    another corpus, or the id field is mapped wrongly). Consumers read passages from :attr:`passages`
    (:func:`~workbench.backends.passage_table.passages_of`).
    """

    transient: tuple[type[BaseException], ...] = (OSError, TimeoutError)
    failures: tuple[type[BaseException], ...] = ()
    embeds_queries = True
    """Whether the dense channel embeds the queries here (False: the engine embeds them itself, e.g. a retriever
    server, so no embedder is needed)."""

    def __init__(
        self,
        passages: Any,
        connection: Connection,
        *,
        embedder: Any = None,
        counter: CostCounter | None = None,
    ) -> None:
        if self.embeds_queries and connection.channel == "dense" and embedder is None:
            raise ConfigError("the dense channel needs an embedder", "retrieval.connection.channel")
        self.passages = PassageTable.of(passages)
        # the run's corpus as the engine was first asked about (its fingerprint); rows the engine adds are not in it
        self.corpus: Corpus = Corpus(tuple(self.passages["chunk_id"]), tuple(self.passages["text"]))
        self.connection = connection
        self.embedder = embedder
        self.counter = counter if counter is not None else CostCounter()

    def _with_retries(self, what: str, call: Callable[[], T], tries: int | None = None) -> T:
        """``call()``, tried ``1 + retries`` times (or ``tries``) when it raises a transient error, sleeping
        ``backoff_s`` · 2^n between tries; then a one-line :class:`EngineError` saying ``what`` failed and how often."""
        conn = self.connection
        tries = conn.retries + 1 if tries is None else tries
        for attempt in range(tries):
            try:
                return call()
            except WorkbenchError:
                raise
            except self.transient as exc:
                if not self._retryable(exc):  # e.g. refused credentials: another try would be refused too
                    raise EngineError(f"{what} failed: {first_line(exc, conn.secret())}", conn.where) from None
                if attempt + 1 == tries:
                    detail = first_line(exc, conn.secret())
                    raise EngineError(f"{what} failed after {tries} tries: {detail}", conn.where) from None
                delay = conn.backoff_s * 2**attempt
                log.warning("%s: %s failed (%s); retrying in %.1f s", conn.where, what, type(exc).__name__, delay)
                self._reset()
                time.sleep(delay)
            except self.failures as exc:  # the engine refused the request itself: no retry helps
                raise EngineError(f"{what} failed: {first_line(exc, conn.secret())}", conn.where) from None
        raise AssertionError("unreachable")

    def count(self) -> int | None:
        """The number of passages the engine's index holds (retried like a search); None when the engine cannot say
        (a retriever server other than ``serve-retriever``)."""
        return self._with_retries("count", self._count)

    def ping(self) -> str | None:
        """One try at :meth:`count`, no retry: None when the engine answered, else the one-line error (for
        ``/health``; never raises an engine error)."""
        try:
            self._with_retries("count", self._count, tries=1)
        except EngineError as exc:
            return str(exc)
        return None

    def _count(self) -> int | None:
        """The engine's passage count (one request; None: the engine cannot say)."""
        raise NotImplementedError

    def _retryable(self, exc: BaseException) -> bool:
        """Whether a transient-typed error is worth another try (subclasses rule out, e.g., refused credentials)."""
        return True

    def _reset(self) -> None:
        """Drop any connection state before a retry (subclasses holding connections reopen them)."""

    def close(self) -> None:
        """Release the engine's connections (a later search reopens them)."""
        self._reset()

    def _engine_search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Every query's hits: the dense channel embeds the queries in one batch, then the queries run
        ``max_concurrency`` at a time (:meth:`_search_one`)."""
        vectors: list[Any] = [None] * len(queries)
        if self.connection.channel == "dense":
            vectors = list(np.asarray(self.embedder.encode(queries), dtype=np.float32))
        jobs = list(zip(queries, vectors, strict=True))
        workers = min(self.connection.max_concurrency, len(jobs))
        if workers <= 1:
            return [self._search_one(query, vector, k) for query, vector in jobs]

        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda job: self._search_one(job[0], job[1], k), jobs))

    def _search_one(self, query: str, vector: np.ndarray | None, k: int) -> list[Hit]:
        """One query's top-``k`` hits (:data:`Hit`), best first (``vector``: its embedding on the dense channel, None
        on the lexical one)."""
        raise NotImplementedError

    def _search(self, queries: list[str], k: int) -> list[RetrievalResult]:
        if not queries:
            return []
        hits = self._with_retries(f"{self.connection.channel} search", lambda: self._engine_search(queries, k))
        return [self._result(query, found) for query, found in zip(queries, hits, strict=True)]

    def _result(self, query: str, found: Sequence[Hit]) -> RetrievalResult:
        rows = [self._row(hit) for hit in found]
        missing = rows.count(None)
        if missing:
            raise EngineError(
                f"returned {missing} id(s) the run's corpus does not hold, without their text (is"
                f" {self.connection.field_name('id')!r} the chunk id, does {self.connection.field_name('text')!r}"
                " name the text, and was this corpus indexed with `workbench index`?)",
                self.connection.where,
            )
        return RetrievalResult(
            query=query,
            ids=[str(hit[0]) for hit in found],
            indices=np.array(rows, dtype=np.int64),
            scores=np.array([hit[1] for hit in found], dtype=np.float32),
            ranks=np.arange(1, len(found) + 1, dtype=np.int32),
        )

    def _row(self, hit: Hit) -> int | None:
        """The passage table's row of a hit: the corpus's own row, else a row appended from the text, title and doc
        id the engine returned (None: the table lacks the id and the engine gave no text)."""
        pid = str(hit[0])
        row = self.passages.row(pid)
        if row is not None:
            return row
        fields = hit[2] if len(hit) > 2 else {}
        text = fields.get("text")
        if not isinstance(text, str):
            return None
        doc_id = fields.get("doc_id")
        return self.passages.add(
            pid, text, title=str(fields.get("title") or ""), doc_id=str(doc_id) if doc_id not in (None, "") else None
        )
