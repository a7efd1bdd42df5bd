"""Passage corpora for retrieval, built from Wikipedia articles.

A corpus is a :class:`datasets.Dataset` with one row per chunk: ``chunk_id``, ``doc_id``, ``title``, ``text``,
``index`` (position of the chunk in its document), ``start`` / ``end`` (character offsets in the summary) and
``topic``. ``doc_id`` is the article key, the same id wiki-qa puts in its gold passages, so retrieval recall of
the gold passage can be measured by doc id (or by chunk id ``<doc_id>#0`` for the default one-chunk-per-summary
corpus).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.core.errors import ConfigError, DataError
from workbench.data.chunkers import Chunk, Chunker, FixedSizeChunker, RecursiveChunker, chunk_documents, make_chunk_id
from workbench.data.field_mapping import map_corpus_row
from workbench.data.record_files import read_rows

if TYPE_CHECKING:
    import datasets

    from workbench.data.wikiqa import WikiArticle

CORPUS_COLUMNS = ("chunk_id", "doc_id", "title", "text", "index", "start", "end", "topic")
CHUNKINGS = ("none", "fixed", "recursive")


def corpus_features() -> Any:
    """The HF ``Features`` of a corpus dataset (datasets is imported here, not at module import)."""
    from datasets import Features, Value

    kinds = {"index": "int32", "start": "int32", "end": "int32"}
    return Features({name: Value(kinds.get(name, "string")) for name in CORPUS_COLUMNS})


def make_chunker(chunking: str, size: int = 600, overlap: int = 100) -> Chunker | None:
    """The corpus chunker ``chunking`` names (``none`` → None: one passage per document); ``size`` / ``overlap`` in
    characters (``overlap`` for fixed chunking only)."""

    if chunking == "fixed":
        return FixedSizeChunker(size=size, overlap=overlap, unit="chars")
    if chunking == "recursive":
        return RecursiveChunker(max_chars=size)
    if chunking != "none":
        raise ConfigError(f"unknown chunking {chunking!r} (known: {', '.join(CHUNKINGS)})", "data.chunking")
    return None


MAX_SHOWN_ID_CHARS = 80
"""Most characters of a document id quoted in an error (the rest is cut, marked with …)."""


@dataclass
class CorpusFile:
    """A user's corpus file as read: its documents in file order, and the columns that are no corpus field (dropped:
    a passage holds doc_id, title, text and topic only), in first-seen order."""

    documents: list[WikiArticle]
    dropped: list[str]


def read_corpus_file(path: str | Path, fields: Mapping[str, str] | None = None) -> CorpusFile:
    """The documents of a user corpus file (.jsonl / .json / .parquet), each record's ``doc_id``, ``title``, ``text``
    (and optional ``topic``) read from the columns ``fields`` maps them to (``data.corpus_fields``; a field not
    mapped is read from the column of its own name: :func:`~workbench.data.field_mapping.map_corpus_row`).

    DataError naming the file (and the row) for a record without those fields, or a ``doc_id`` seen before: a
    document id names one document (retrieval recall, chunk ids and gold passages all count on it)."""
    from workbench.data.wikiqa import WikiArticle

    documents = []
    first_row: dict[str, int] = {}
    dropped: dict[str, None] = {}
    for number, row in enumerate(read_rows(Path(path)), start=1):
        (doc_id, title, text, topic), extra = map_corpus_row(row, fields or {}, f"{path}, row {number}")
        dropped.update(dict.fromkeys(str(column) for column in extra))
        if doc_id in first_row:
            shown = doc_id if len(doc_id) <= MAX_SHOWN_ID_CHARS else doc_id[:MAX_SHOWN_ID_CHARS] + "…"
            what = (
                f"rows {first_row[doc_id]} and {number} have the same doc_id {shown!r}: each document needs its own id"
            )
            raise DataError(what, str(path))
        first_row[doc_id] = number
        documents.append(WikiArticle(doc_id, title, text, "", topic))
    if not documents:
        raise DataError("the corpus file holds no documents", str(path))
    return CorpusFile(documents, list(dropped))


def read_corpus_documents(path: str | Path, fields: Mapping[str, str] | None = None) -> list[WikiArticle]:
    """The documents of a user corpus file (:func:`read_corpus_file`)."""
    return read_corpus_file(path, fields).documents


def corpus_documents(
    source: str, articles: Sequence[WikiArticle] | None = None, fields: Mapping[str, str] | None = None
) -> list[WikiArticle]:
    """The documents of a corpus ``source``: ``"wiki"`` (the embedded summaries; ``articles`` when already loaded)
    or the path of a user corpus file, read with the field mapping ``fields`` (``data.corpus_fields``)."""
    if source == "wiki":
        from workbench.data.wikiqa import load_articles

        return list(articles) if articles is not None else load_articles()
    return read_corpus_documents(source, fields)


def _whole_summaries(articles: Sequence[WikiArticle]) -> list[Chunk]:
    return [Chunk(make_chunk_id(a.doc_id, 0), a.doc_id, 0, a.extract, 0, len(a.extract)) for a in articles]


def build_corpus(articles: Sequence[WikiArticle], chunker: Chunker | None = None) -> datasets.Dataset:
    """One row per chunk of each article's summary, in article order (see the module docstring for columns).

    Without a ``chunker`` every summary is one chunk with ``chunk_id = f"{doc_id}#0"``. Duplicate doc ids
    raise ``ValueError``.
    """
    from datasets import Dataset

    return Dataset.from_dict(corpus_columns(articles, chunker), features=corpus_features())


def corpus_columns(articles: Sequence[WikiArticle], chunker: Chunker | None = None) -> dict[str, list]:
    """The corpus as plain columns (``{column: values}``, the rows of :func:`build_corpus`) without ``datasets``: what
    the runtime searches. Duplicate doc ids raise ``ValueError``."""
    by_id = {}
    for article in articles:
        if article.doc_id in by_id:
            raise ValueError(f"articles: duplicate doc_id {article.doc_id!r}")
        by_id[article.doc_id] = article
    if chunker is None:
        chunks = _whole_summaries(articles)
    else:
        chunks = chunk_documents(chunker, [(a.doc_id, a.extract) for a in articles])
    columns: dict[str, list] = {name: [] for name in CORPUS_COLUMNS}
    for chunk in chunks:
        article = by_id[chunk.doc_id]
        for name, value in (
            ("chunk_id", chunk.chunk_id),
            ("doc_id", chunk.doc_id),
            ("title", article.title),
            ("text", chunk.text),
            ("index", chunk.index),
            ("start", chunk.start),
            ("end", chunk.end),
            ("topic", article.topic),
        ):
            columns[name].append(value)
    return columns


def document_text(pieces: Sequence[tuple[int, str, int | None, int | None]]) -> str:
    """A document rebuilt from its corpus chunks ``(index, text, start, end)``, joined in ``index`` order.

    With character offsets for every chunk, overlapping text (fixed-size chunking with overlap) is kept once and a
    gap becomes one space; without offsets the chunks are joined with single spaces.
    """
    ordered = sorted(pieces, key=lambda p: p[0])
    if not ordered:
        return ""
    if any(p[2] is None or p[3] is None for p in ordered):
        return " ".join(p[1] for p in ordered if p[1])
    out, covered = "", None
    for _, text, start, end in ordered:
        assert start is not None and end is not None
        if covered is None:
            out = text
        elif start >= covered:
            out = f"{out} {text}" if out else text
        else:
            out += text[covered - start :]
        covered = end if covered is None else max(covered, end)
    return out


def _optional_column(corpus: Any, name: str) -> list | None:
    """Column ``name`` of a Dataset or a mapping of columns as a list (None when the corpus has no such column)."""
    names = getattr(corpus, "column_names", None)
    if names is None:
        names = list(corpus)
    return list(corpus[name]) if name in names else None


def rebuilt_documents(corpus: Any) -> list[tuple[str, str, str, str]]:
    """``(doc_id, title, text, topic)`` of every document of ``corpus`` (a Dataset or a mapping of columns with
    ``doc_id``, ``title``, ``text``; ``index`` / ``start`` / ``end`` / ``topic`` when present), in order of first
    appearance. A document's text is its chunks joined by :func:`document_text` (``index`` order, overlaps kept
    once), so a corpus of one passage per document gives the passages back and a chunked one its documents."""
    doc_ids, titles, texts = (list(corpus[name]) for name in ("doc_id", "title", "text"))
    index = _optional_column(corpus, "index")
    start, end = _optional_column(corpus, "start"), _optional_column(corpus, "end")
    topics = _optional_column(corpus, "topic")
    rows: dict[str, list[int]] = {}
    for row, doc_id in enumerate(doc_ids):
        rows.setdefault(str(doc_id), []).append(row)
    offsets = start is not None and end is not None
    out = []
    for doc_id, members in rows.items():
        pieces = [
            (
                int(index[r]) if index is not None else n,
                str(texts[r]),
                int(start[r]) if offsets else None,
                int(end[r]) if offsets else None,
            )
            for n, r in enumerate(members)
        ]
        first = members[0]
        topic = str(topics[first]) if topics is not None else ""
        out.append((doc_id, str(titles[first]), document_text(pieces), topic))
    return out


def chunked_view(corpus: Any, chunker: Chunker, tag: str) -> dict[str, list]:
    """A method's own chunked view of ``corpus``: its documents rebuilt (:func:`rebuilt_documents`) and cut again by
    ``chunker``, whatever chunking the corpus was built with, as plain columns (:data:`CORPUS_COLUMNS`).

    Chunk ids are ``<doc_id>#<tag><index>`` (``tag`` names the view, e.g. ``"w"`` for InSemRAG's token windows), so
    they never collide with the corpus's own ``<doc_id>#<index>``; ``index`` is the chunk's position in its document
    (neighbours are ``index ± 1`` of the same ``doc_id``), ``start`` / ``end`` its offsets in the rebuilt text.
    """
    documents = rebuilt_documents(corpus)
    meta = {doc_id: (title, topic) for doc_id, title, _, topic in documents}
    chunks = chunk_documents(chunker, [(doc_id, text) for doc_id, _, text, _ in documents if text.strip()])
    columns: dict[str, list] = {name: [] for name in CORPUS_COLUMNS}
    for chunk in chunks:
        title, topic = meta[chunk.doc_id]
        for name, value in (
            ("chunk_id", f"{chunk.doc_id}#{tag}{chunk.index}"),
            ("doc_id", chunk.doc_id),
            ("title", title),
            ("text", chunk.text),
            ("index", chunk.index),
            ("start", chunk.start),
            ("end", chunk.end),
            ("topic", topic),
        ):
            columns[name].append(value)
    return columns


def corpus_chunks(corpus: datasets.Dataset) -> list[Chunk]:
    """The corpus rows back as :class:`Chunk` objects (e.g. for a :class:`~workbench.data.chunkers.ChunkIndex`)."""
    return [
        Chunk(row["chunk_id"], row["doc_id"], row["index"], row["text"], row["start"], row["end"]) for row in corpus
    ]


def corpus_fingerprint(corpus: Any) -> str:
    """A content hash of the corpus's chunk ids and texts, in order (a cache key for embedding matrices; what a
    bundle records so the runtime can check it searches the corpus the features were collected over). ``corpus`` is
    a Dataset or a mapping of columns."""
    digest = hashlib.sha256()
    for chunk_id, text in zip(corpus["chunk_id"], corpus["text"], strict=True):
        digest.update(chunk_id.encode("utf-8") + b"\x1f" + text.encode("utf-8") + b"\x1e")
    return digest.hexdigest()[:16]


def corpus_sample(corpus: Any, rows: Sequence[dict], size: int, seed: int) -> Any:
    """Every chunk of the ``rows``' gold documents (``gold_passages[*].doc_id``) plus seeded random other chunks, up
    to ``size`` passages in all, in corpus order — a smaller corpus whose questions keep their gold passages."""

    gold_docs = {p["doc_id"] for r in rows for p in r["gold_passages"]}
    doc_ids = corpus["doc_id"]
    gold = [i for i, d in enumerate(doc_ids) if d in gold_docs]
    others = [i for i, d in enumerate(doc_ids) if d not in gold_docs]
    picked = gold + random.Random(seed).sample(others, max(0, min(len(others), size - len(gold))))
    return corpus.select(sorted(picked))
