"""The index fingerprint a bundle records (document count + probe hits, :mod:`workbench.bundle.external`) taken on
the backends that joined after pgvector and Milvus: Lucene, the Elasticsearch / OpenSearch stand-in, and a ``http``
retriever server — ``serve-retriever`` says how many documents it searches; another kind of server cannot, and its
probes alone fingerprint it."""

from __future__ import annotations

import pytest

from tests.engine_servers import es_standin
from tests.toy_corpus import corpus_dataset
from workbench.backends.retrieval_elasticsearch import ElasticsearchIndex, ElasticsearchRetriever
from workbench.backends.retrieval_engines import Connection
from workbench.backends.retrieval_http import HttpRetriever
from workbench.backends.retrievers import BM25Retriever
from workbench.bundle.external import PROBE_QUERIES, engine_fingerprint, fingerprint_differences
from workbench.bundle.manifest import EngineFingerprintRecord
from workbench.serve.retriever_app import ServedIndex, start_in_thread
from workbench.stages.index_engine import push_corpus


def _record(fingerprint: dict) -> EngineFingerprintRecord:
    from workbench.bundle.manifest import ProbeHitsRecord

    probes = [ProbeHitsRecord(**probe) for probe in fingerprint["probes"]]
    return EngineFingerprintRecord(documents=fingerprint["documents"], k=fingerprint["k"], probes=probes)


def test_a_lucene_index_is_fingerprinted_and_a_changed_one_differs(lucene_jvm, tmp_path):
    from workbench.backends.retrieval_lucene import LuceneIndex, LuceneRetriever

    conn = Connection(str(tmp_path / "index"), None, channel="lexical")
    corpus = corpus_dataset()
    push_corpus(corpus.select(range(5)), LuceneIndex(conn), None, batch_size=8)
    before = engine_fingerprint(LuceneRetriever(corpus, conn), PROBE_QUERIES, 5)
    assert before["documents"] == 5 and _record(before).documents == 5
    push_corpus(corpus, LuceneIndex(conn), None, batch_size=8)  # one passage more
    after = engine_fingerprint(LuceneRetriever(corpus, conn), PROBE_QUERIES, 5)
    assert fingerprint_differences(before, after) == "it holds 6 documents, the bundle's index held 5"
    assert fingerprint_differences(after, engine_fingerprint(LuceneRetriever(None, conn), PROBE_QUERIES, 5)) is None


def test_an_elasticsearch_index_is_counted(monkeypatch):
    monkeypatch.setenv("WB_TEST_FP_SECRET", "wb:fp-secret")
    with es_standin("elasticsearch", auth="wb:fp-secret") as url:
        conn = Connection(url, "passages", channel="lexical", credentials_env="WB_TEST_FP_SECRET", retries=0)
        push_corpus(corpus_dataset(), ElasticsearchIndex(conn), None, batch_size=4)
        engine = ElasticsearchRetriever(corpus_dataset(), conn)
        fingerprint = engine_fingerprint(engine, PROBE_QUERIES, 3)
        assert fingerprint["documents"] == 6 and engine.ping() is None
        engine.close()


def test_a_retriever_server_says_its_count_and_another_cannot():
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route

    from workbench.serve.uvicorn_run import ServerThread

    corpus = corpus_dataset()
    local = BM25Retriever(corpus, cache=False)
    with start_in_thread(ServedIndex(local, corpus, "bm25", ("lexical",))) as server:
        engine = HttpRetriever(corpus, Connection(server.retrieve_url, None, channel="lexical"))
        assert engine.count() == 6
        assert engine_fingerprint(engine, PROBE_QUERIES, 3)["documents"] == 6
        engine.close()

    async def retrieve(request):
        body = await request.json()
        hit = {"document": {"id": "d2#0", "contents": '"Hamlet"\nHamlet is a tragedy.'}, "score": 1.5}
        return JSONResponse({"result": [[hit] for _ in body["queries"]]})

    async def health(request):
        return PlainTextResponse("fine")

    app = Starlette(routes=[Route("/retrieve", retrieve, methods=["POST"]), Route("/health", health)])
    with ServerThread(app, host="127.0.0.1", port=0, name="foreign-fp").start(10) as foreign:
        engine = HttpRetriever(corpus, Connection(f"{foreign.url}/retrieve", None, channel="lexical"))
        fingerprint = engine_fingerprint(engine, PROBE_QUERIES, 3)
        assert fingerprint["documents"] is None and _record(fingerprint).documents is None
        assert engine.ping() is None  # reachable, though it cannot count
        assert fingerprint_differences(fingerprint, engine_fingerprint(engine, PROBE_QUERIES, 3)) is None
        engine.close()
    with pytest.raises(ValueError, match="must be >= 0"):
        _record({**fingerprint, "documents": -1})
