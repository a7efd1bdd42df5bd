"""``workbench index``: push a recipe's corpus into its external retrieval engine, or adopt an index already there.

The corpus is the one ``build_data`` makes from the recipe's data section (the embedded summaries or the user's
corpus file, chunked as ``data.chunking`` says), so the engine holds exactly the passages — under their chunk ids —
the run's stages search. Pushing is batched (``retrieval.connection.batch_size`` passages per write), resumable and
idempotent by id: each batch first asks the engine which of its ids it holds and embeds and writes only the others
(an upsert, so a row is never duplicated); an interrupted push resumes where it stopped. Vectors come from the
run's embedder (``embedder`` section). At the end every passage id is checked present and the engine's count read.

``adopt``: nothing is written; the index must exist with the mapped fields and the embedder's dimension, and a
sample of its rows must be passages of the corpus with the same text (so a production index built elsewhere is
used as it is, after checking it holds what the recipe's corpus says).
"""

from __future__ import annotations

import importlib
import logging
import time
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from workbench.backends.factory import build_embedder
from workbench.backends.retrieval_engines import ENGINES, Connection, EngineError, redact_uri
from workbench.core.errors import ConfigError
from workbench.core.logs import progress
from workbench.data.corpus import build_corpus
from workbench.stages.build_data.run import _documents, make_chunker

log = logging.getLogger(__name__)

ADOPT_SAMPLE = 20
"""Rows of an adopted index compared with the corpus."""


class IndexWriter(Protocol):
    """What ``workbench index`` needs of an engine's writer (one per external backend module)."""

    connection: Any
    needs_vectors: bool  # False: a lexical-only engine (lucene); push_corpus embeds nothing

    def exists(self) -> bool: ...
    def prepare(self, dim: int | None) -> None: ...
    def present(self, ids: list[str]) -> set[str]: ...
    def write(self, rows: list[dict[str, Any]], vectors: np.ndarray) -> None: ...
    def count(self) -> int: ...
    def sample(self, n: int) -> list[dict[str, str]]: ...
    def close(self) -> None: ...


WRITERS: dict[str, tuple[str, str]] = {
    "pgvector": ("workbench.backends.retrieval_pgvector", "PgvectorIndex"),
    "milvus": ("workbench.backends.retrieval_milvus", "MilvusIndex"),
    "lucene": ("workbench.backends.retrieval_lucene", "LuceneIndex"),
    "elasticsearch": ("workbench.backends.retrieval_elasticsearch", "ElasticsearchIndex"),
    "opensearch": ("workbench.backends.retrieval_opensearch", "OpenSearchIndex"),
}
"""Each external backend's writer class (module, name), imported when used."""


@dataclass
class IndexReport:
    """What ``workbench index`` did: passages in the corpus, written now, found already there, the engine's count,
    and the seconds it took."""

    passages: int
    written: int
    skipped: int
    engine_count: int
    seconds: float
    adopted: bool = False

    def line(self) -> str:
        """One line for the terminal."""
        if self.adopted:
            return f"adopted: the index holds {self.engine_count} passages; a sample matches the corpus"
        rate = self.written / self.seconds if self.seconds > 0 else 0.0
        return (
            f"{self.passages} passages: {self.written} written ({rate:.1f} docs/s), {self.skipped} already there;"
            f" the index holds {self.engine_count}"
        )


def open_writer(config: Any) -> IndexWriter:
    """The writer of the recipe's external backend (ConfigError for an in-process one or a retriever server)."""

    backend = config.retrieval.backend
    if backend not in WRITERS:
        # an in-process index is built by the run; a retriever server (http) is filled by whoever runs it
        what = (
            "is reached through a server that holds its own index"
            if ENGINES[backend].external
            else "is built in this process"
        )
        raise ConfigError(f"{backend} {what}: `workbench index` pushes into {', '.join(WRITERS)}", "retrieval.backend")
    module, name = WRITERS[backend]
    return getattr(importlib.import_module(module), name)(Connection(**asdict(config.retrieval.connection)))


def recipe_corpus(config: Any) -> Any:
    """The passage corpus ``build_data`` makes for the recipe's data section (a Dataset)."""

    documents, _ = _documents(config.data, None)
    return build_corpus(documents, chunker=make_chunker(config.data))


def recipe_embedder(config: Any) -> Any:
    """The run's embedder, as the stages build it."""

    section = config.embedder
    return build_embedder(
        section.model, batch_size=section.batch_size, device=section.device, device_key="embedder.device"
    )


def push_corpus(corpus: Any, writer: IndexWriter, embedder: Any, batch_size: int) -> IndexReport:
    """Write every passage of ``corpus`` (a Dataset, or a mapping of equal-length columns, with chunk_id, doc_id,
    title and text) the engine lacks, ``batch_size`` at a time (see the module docstring), then check every id is
    present; a one-line EngineError when one is not. ``embedder`` is None for a writer that stores no vectors
    (``needs_vectors`` False)."""

    start = time.perf_counter()
    names = ("chunk_id", "doc_id", "title", "text")
    # whole columns at once: a Dataset read cell by cell costs ~0.2 ms a cell (142 s for 200k passages)
    columns = [[str(value) for value in corpus[name][:]] for name in names]
    rows = [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]
    writer.prepare(embedder.dim if embedder is not None else None)
    written = skipped = 0
    with progress("index passages", len(rows)) as bar:
        for begin in range(0, len(rows), batch_size):
            batch = rows[begin : begin + batch_size]
            there = writer.present([r["chunk_id"] for r in batch])
            todo = [r for r in batch if r["chunk_id"] not in there]
            if todo:
                writer.write(todo, _vectors(embedder, todo))
            written, skipped = written + len(todo), skipped + len(batch) - len(todo)
            elapsed = time.perf_counter() - start
            bar.advance(len(batch), note=f"{written / elapsed:.1f} docs/s" if elapsed > 0 else None)
    missing = 0
    for begin in range(0, len(rows), batch_size):
        ids = [r["chunk_id"] for r in rows[begin : begin + batch_size]]
        missing += len(set(ids) - writer.present(ids))
    if missing:
        raise EngineError(f"{missing} passage(s) are not in the index after writing them", writer.connection.where)
    return IndexReport(len(rows), written, skipped, writer.count(), time.perf_counter() - start)


def _vectors(embedder: Any, rows: list[dict[str, Any]]) -> np.ndarray:
    if embedder is None:
        return np.zeros((len(rows), 0), dtype=np.float32)
    return np.asarray(embedder.encode([r["text"] for r in rows]), dtype=np.float32)


def adopt_index(corpus: Any, writer: IndexWriter, embedder: Any, where: str) -> IndexReport:
    """Check an existing index against the corpus without writing (see the module docstring)."""

    if not writer.exists():
        raise EngineError("no such index to adopt: push the corpus with `workbench index` first", where)
    # an existing index: checks its fields and dimension, creates nothing
    writer.prepare(embedder.dim if embedder is not None else None)
    texts = dict(zip(corpus["chunk_id"], corpus["text"], strict=True))
    sample = writer.sample(ADOPT_SAMPLE)
    if not sample:
        raise EngineError("the index is empty", where)
    unknown = sum(row["id"] not in texts for row in sample)
    if unknown:
        raise EngineError(
            f"{unknown} of {len(sample)} sampled ids are not the corpus's chunk ids (check retrieval.connection.fields"
            " id and data.chunking)",
            where,
        )
    differ = sum(texts[row["id"]] != row["text"] for row in sample)
    if differ:
        raise EngineError(
            f"{differ} of {len(sample)} sampled passages hold another text than the corpus's (check"
            " retrieval.connection.fields text)",
            where,
        )
    return IndexReport(len(corpus), 0, 0, writer.count(), 0.0, adopted=True)


def run_index(config: Any, *, adopt: bool = False) -> IndexReport:
    """``workbench index``: push the recipe's corpus into its engine, or adopt the index there (``adopt``)."""

    writer = open_writer(config)
    try:
        corpus = recipe_corpus(config)
        embedder = recipe_embedder(config) if getattr(writer, "needs_vectors", True) else None
        conn = config.retrieval.connection
        if adopt:
            where = f"{redact_uri(conn.uri)} ({conn.index})" if conn.index else redact_uri(conn.uri)
            return adopt_index(corpus, writer, embedder, where)
        return push_corpus(corpus, writer, embedder, conn.batch_size)
    finally:
        writer.close()
