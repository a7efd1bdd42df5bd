"""pgvector against a real PostgreSQL 18 + pgvector (started by the session fixture): pushing a corpus (idempotent,
resumable), dense search agreeing with the in-process dense index, the full-text channel, and the faults (a missing
table, a mapped column the table lacks, a dimension mismatch, an unreachable server, a missing credential) as one
line naming the URI without its password."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine_servers import fresh_database, restart, stop_immediately
from tests.toy_corpus import corpus_dataset
from tests.unit.engines.conftest import HashingEmbedder, assert_engine_passages_extend_the_corpus, assert_load_faults
from workbench.backends.cost import CostCounter
from workbench.backends.retrieval_engines import Connection, EngineError
from workbench.backends.retrieval_pgvector import PgvectorIndex, PgvectorRetriever
from workbench.backends.retrievers import DenseRetriever
from workbench.stages.index_engine import adopt_index, push_corpus


@pytest.fixture(scope="module")
def pg_uri(pg_server):
    return fresh_database(pg_server, "pgvector_tests")


@pytest.fixture(scope="module")
def indexed(pg_uri):
    """The toy corpus pushed into table ``passages``."""
    connection = Connection(pg_uri, "passages", batch_size=4)
    writer = PgvectorIndex(connection)
    report = push_corpus(corpus_dataset(), writer, HashingEmbedder(), batch_size=4)
    writer.close()
    return connection, report


def test_push_writes_every_passage_once_and_a_rerun_writes_nothing(indexed):
    connection, report = indexed
    assert (report.passages, report.written, report.skipped, report.engine_count) == (6, 6, 0, 6)
    writer = PgvectorIndex(connection)
    again = push_corpus(corpus_dataset(), writer, HashingEmbedder(), batch_size=4)
    assert (again.written, again.skipped, again.engine_count) == (0, 6, 6)
    writer.close()


def test_an_interrupted_push_resumes_with_the_missing_passages(pg_uri):
    connection = Connection(pg_uri, "resumed")
    writer = PgvectorIndex(connection)
    corpus = corpus_dataset()
    push_corpus(corpus.select(range(2)), writer, HashingEmbedder(), batch_size=2)  # stopped after two passages
    report = push_corpus(corpus, writer, HashingEmbedder(), batch_size=2)
    assert (report.written, report.skipped, report.engine_count) == (4, 2, 6)
    writer.close()


def test_dense_search_matches_the_in_process_index_and_counts_calls(indexed):
    connection, _ = indexed
    counter = CostCounter()
    engine = PgvectorRetriever(corpus_dataset(), connection, embedder=HashingEmbedder(), counter=counter)
    local = DenseRetriever(corpus_dataset(), HashingEmbedder(), cache=False)
    queries = ["Which river flows through Paris?", "Who wrote Hamlet?", "market town in England"]
    got, want = engine.search(queries, k=3), local.search(queries, k=3)
    for g, w in zip(got, want, strict=True):
        assert g.ids == w.ids and list(g.indices) == list(w.indices) and list(g.ranks) == [1, 2, 3]
        np.testing.assert_allclose(g.scores, w.scores, atol=1e-5)
    assert counter.retrieval_calls == 3 and counter.seconds["retrieve"] > 0
    engine.close()


def test_the_lexical_channel_ranks_by_full_text(indexed):
    connection, _ = indexed
    lexical = Connection(connection.uri, connection.index, channel="lexical", max_concurrency=2)
    engine = PgvectorRetriever(corpus_dataset(), lexical)
    hamlet, nothing = engine.search(["Who wrote the tragedy Hamlet?", "zzzz qqqq"], k=2)
    assert hamlet.ids[0] == "d2#0" and hamlet.scores[0] > 0 and len(nothing) == 0
    engine.close()


def test_adopting_an_index_checks_a_sample_against_the_corpus(indexed):
    connection, _ = indexed
    writer = PgvectorIndex(connection)
    assert adopt_index(corpus_dataset(), writer, HashingEmbedder(), "here").engine_count == 6
    other = corpus_dataset([("x1", "X", "another text"), ("x2", "Y", "yet another")])
    with pytest.raises(EngineError, match="sampled ids are not the corpus's chunk ids"):
        adopt_index(other, writer, HashingEmbedder(), "here")
    writer.close()


def test_faults_are_one_line_naming_the_uri(indexed, pg_server, monkeypatch):
    connection, _ = indexed
    corpus = corpus_dataset()
    assert_load_faults(PgvectorRetriever, connection, "table")
    unreachable = Connection("postgresql://bob:s3cret-pw@127.0.0.1:9/db", "t", retries=1, backoff_s=0.01, timeout_s=1)
    with pytest.raises(EngineError) as caught:
        PgvectorRetriever(corpus, unreachable, embedder=HashingEmbedder())
    message = str(caught.value)
    assert "postgresql://bob:***@127.0.0.1:9/db (t): connect failed after 2 tries" in message
    assert "s3cret-pw" not in message and "\n" not in message
    monkeypatch.delenv("WB_TEST_PG_PASSWORD", raising=False)
    needs_secret = Connection(connection.uri, connection.index, credentials_env="WB_TEST_PG_PASSWORD")
    with pytest.raises(EngineError, match=r"WB_TEST_PG_PASSWORD .* is not set"):
        PgvectorRetriever(corpus, needs_secret, embedder=HashingEmbedder())


def test_ids_the_corpus_lacks_come_with_their_passage_from_the_table(indexed):
    connection, _ = indexed
    assert_engine_passages_extend_the_corpus(PgvectorRetriever, connection)


def test_a_server_killed_mid_run_is_retried_then_one_line_and_a_restart_recovers(indexed, pg_server):
    connection, _ = indexed
    quick = Connection(connection.uri, connection.index, retries=1, backoff_s=0.01, timeout_s=2)
    engine = PgvectorRetriever(corpus_dataset(), quick, embedder=HashingEmbedder())
    assert engine.search(["Who wrote Hamlet?"], k=1)[0].ids == ["d2#0"]
    stop_immediately(pg_server)
    try:
        with pytest.raises(EngineError, match=r"\(passages\): dense search failed after 2 tries: OperationalError"):
            engine.search(["Who wrote Hamlet?"], k=1)
    finally:
        restart(pg_server)
    assert engine.search(["Who wrote Hamlet?"], k=1)[0].ids == ["d2#0"]  # reconnects: the run goes on
    engine.close()
