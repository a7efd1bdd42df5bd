"""Milvus against Milvus Lite 2.5 (the C++ engine, a local file; the same client code path as a server): pushing a
corpus (idempotent), dense search agreeing with the in-process dense index, Milvus's own BM25 as the lexical
channel, and the faults (a missing collection, a mapped field it lacks, a dimension mismatch) as one line."""

from __future__ import annotations

import numpy as np
import pytest

from tests.toy_corpus import corpus_dataset
from tests.unit.engines.conftest import HashingEmbedder, assert_engine_passages_extend_the_corpus, assert_load_faults
from workbench.backends.cost import CostCounter
from workbench.backends.retrieval_engines import Connection
from workbench.backends.retrieval_milvus import MilvusIndex, MilvusRetriever
from workbench.backends.retrievers import DenseRetriever
from workbench.stages.index_engine import adopt_index, push_corpus


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """The toy corpus pushed into collection ``passages`` of a Milvus Lite file."""
    connection = Connection(str(tmp_path_factory.mktemp("milvus") / "m.db"), "passages", batch_size=4)
    writer = MilvusIndex(connection)
    report = push_corpus(corpus_dataset(), writer, HashingEmbedder(), batch_size=4)
    again = push_corpus(corpus_dataset(), writer, HashingEmbedder(), batch_size=4)
    adopted = adopt_index(corpus_dataset(), writer, HashingEmbedder(), "here")
    writer.close()
    return connection, report, again, adopted


def test_push_writes_each_passage_once_and_adopting_checks_it(indexed):
    _, report, again, adopted = indexed
    assert (report.written, report.skipped, report.engine_count) == (6, 0, 6)
    assert (again.written, again.skipped, again.engine_count) == (0, 6, 6)
    assert adopted.adopted and adopted.engine_count == 6


def test_dense_and_bm25_channels(indexed):
    connection, *_ = indexed
    counter = CostCounter()
    dense = MilvusRetriever(corpus_dataset(), connection, embedder=HashingEmbedder(), counter=counter)
    local = DenseRetriever(corpus_dataset(), HashingEmbedder(), cache=False)
    queries = ["Which river flows through Paris?", "Who wrote Hamlet?"]
    for got, want in zip(dense.search(queries, k=3), local.search(queries, k=3), strict=True):
        assert got.ids == want.ids and list(got.ranks) == [1, 2, 3]
        np.testing.assert_allclose(got.scores, want.scores, atol=1e-5)
    assert counter.retrieval_calls == 2
    dense.close()
    lexical = Connection(connection.uri, connection.index, channel="lexical")
    bm25 = MilvusRetriever(corpus_dataset(), lexical)
    (hamlet,) = bm25.search(["tragedy Hamlet"], k=2)
    assert hamlet.ids[0] == "d2#0" and hamlet.scores[0] > 0
    bm25.close()


def test_ids_the_corpus_lacks_come_with_their_passage_from_the_collection(indexed):
    connection, *_ = indexed
    assert_engine_passages_extend_the_corpus(MilvusRetriever, connection)


def test_faults_are_one_line(indexed):
    connection, *_ = indexed
    assert_load_faults(MilvusRetriever, connection, "collection")


def test_importing_milvus_lite_leaves_no_pkg_resources_stand_in(monkeypatch):
    """milvus-lite 2.5 imports ``pkg_resources``; where setuptools no longer ships it, the stand-in the backend gives
    it must be gone once milvus_lite is imported (the host process keeps the modules it had)."""
    import importlib.util
    import sys

    from workbench.backends import retrieval_milvus

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pkg_resources" else real_find_spec(name, *a)
    )
    monkeypatch.delitem(sys.modules, "milvus_lite", raising=False)
    monkeypatch.delitem(sys.modules, "pkg_resources", raising=False)
    retrieval_milvus._import_milvus_lite()
    assert "milvus_lite" in sys.modules
    assert "pkg_resources" not in sys.modules
