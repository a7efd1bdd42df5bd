"""Elasticsearch and OpenSearch through their official clients, against the stand-in server (``tests/es_standin.py``:
a SUBSTITUTE speaking their REST API, ``match`` answered by real Lucene BM25, ``knn`` by exact cosine) — and against
a real cluster where ``WORKBENCH_ES_URL`` / ``WORKBENCH_OPENSEARCH_URL`` are set (skipped otherwise, saying so).

Contract: ``workbench index`` pushes (bulk, idempotent by ``_id``, a verified ``_count``) and adopts; the lexical
and dense channels search with the engine's ids and scores and carry the stored text; a missing index, a field the
mapping lacks, another vector dimension, refused credentials, a timeout and an unreachable engine are one line
naming the URI without credentials."""

from __future__ import annotations

import os
import time
import uuid

import numpy as np
import pytest

from tests.engine_servers import es_standin
from tests.toy_corpus import corpus_dataset
from tests.unit.engines.conftest import HashingEmbedder
from workbench.backends.cost import CostCounter
from workbench.backends.retrieval_engines import Connection, EngineError
from workbench.backends.retrievers import DenseRetriever
from workbench.stages.index_engine import adopt_index, push_corpus

pytest.importorskip("elasticsearch", reason="needs the elasticsearch client (pip install 'workbench[engines]')")
pytest.importorskip("opensearchpy", reason="needs opensearch-py (pip install 'workbench[engines]')")
pytest.importorskip("pyserini", reason="the stand-in ranks match queries with Lucene (pyserini)")

from workbench.backends.retrieval_elasticsearch import ElasticsearchIndex, ElasticsearchRetriever
from workbench.backends.retrieval_opensearch import OpenSearchIndex, OpenSearchRetriever

CLASSES = {
    "elasticsearch": (ElasticsearchRetriever, ElasticsearchIndex),
    "opensearch": (OpenSearchRetriever, OpenSearchIndex),
}
REAL_URL_ENV = {"elasticsearch": "WORKBENCH_ES_URL", "opensearch": "WORKBENCH_OPENSEARCH_URL"}
SECRET_ENV = "WB_TEST_SEARCH_SECRET"
SECRET = "wb:standin-pw-5521"
API_KEY = "c3RhbmRpbjprZXk="


@pytest.fixture(scope="module", params=sorted(CLASSES))
def standin(request):
    """``(flavor, url)`` of a stand-in requiring :data:`SECRET` (basic) or, Elasticsearch, :data:`API_KEY`."""
    api_key = API_KEY if request.param == "elasticsearch" else None
    with es_standin(request.param, auth=SECRET, api_key=api_key) as url:
        yield request.param, url


@pytest.fixture(autouse=True)
def secret(monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)


def connection(url: str, index: str = "passages", **kw) -> Connection:
    kw = {"credentials_env": SECRET_ENV, "timeout_s": 5.0, "retries": 1, "backoff_s": 0.01, **kw}
    return Connection(url, index, **kw)


@pytest.fixture(scope="module")
def pushed(standin):
    """The toy corpus pushed twice (4 per bulk), then adopted, on the stand-in."""
    flavor, url = standin
    os.environ[SECRET_ENV] = SECRET  # module scope: monkeypatch is per test
    try:
        return flavor, url, *push_twice_and_adopt(flavor, connection(url))
    finally:
        os.environ.pop(SECRET_ENV, None)


def push_twice_and_adopt(flavor: str, conn: Connection):
    writer = CLASSES[flavor][1](conn)
    first = push_corpus(corpus_dataset(), writer, HashingEmbedder(), batch_size=4)
    again = push_corpus(corpus_dataset(), writer, HashingEmbedder(), batch_size=4)
    adopted = adopt_index(corpus_dataset(), writer, HashingEmbedder(), conn.where)
    writer.close()
    return first, again, adopted


def check_push(first, again, adopted) -> None:
    assert (first.written, first.skipped, first.engine_count) == (6, 0, 6)
    assert (again.written, again.skipped, again.engine_count) == (0, 6, 6)
    assert adopted.adopted and adopted.engine_count == 6


def check_channels(flavor: str, conn: Connection) -> None:
    """Lexical: the engine's BM25 puts the Hamlet passage first and hits carry the stored text; dense: the ids of the
    in-process exact index, scores (1 + cos) / 2 (both engines' cosine score)."""
    retriever_cls = CLASSES[flavor][0]
    counter = CostCounter()
    lexical = retriever_cls(corpus_dataset(), Connection(**{**conn.__dict__, "channel": "lexical"}), counter=counter)
    (hamlet,) = lexical.search(["tragedy Hamlet"], k=2)
    assert (
        hamlet.ids[0] == "d2#0" and hamlet.scores[0] > 0 and list(hamlet.ranks) == list(range(1, len(hamlet.ids) + 1))
    )
    pid, _, fields = lexical._search_one("tragedy Hamlet", None, 1)[0]
    assert pid == "d2#0" and fields["text"].startswith("Hamlet is a tragedy") and fields["title"] == "Hamlet"
    lexical.close()
    dense = retriever_cls(corpus_dataset(), conn, embedder=HashingEmbedder(), counter=counter)
    local = DenseRetriever(corpus_dataset(), HashingEmbedder(), cache=False)
    queries = ["Which river flows through Paris?", "Who wrote Hamlet?"]
    for got, want in zip(dense.search(queries, k=3), local.search(queries, k=3), strict=True):
        assert got.ids == want.ids
        np.testing.assert_allclose(got.scores, (1 + want.scores) / 2, atol=1e-5)
    assert counter.retrieval_calls == 3
    dense.close()


def test_push_is_idempotent_and_adopt_checks_it(pushed):
    _, _, first, again, adopted = pushed
    check_push(first, again, adopted)


def test_lexical_and_dense_channels(pushed):
    flavor, url, *_ = pushed
    check_channels(flavor, connection(url))


def test_lexical_scores_are_lucene_bm25(pushed, lucene_jvm, tmp_path):
    """The stand-in's ``match`` scores are Lucene's own: the same BM25 (k1 1.2, b 0.75) over the same texts here."""
    from workbench.backends.retrieval_lucene import bm25_searcher, write_documents

    flavor, url, *_ = pushed
    retriever = CLASSES[flavor][0](corpus_dataset(), connection(url, channel="lexical"))
    (got,) = retriever.search(["river France"], k=3)
    retriever.close()
    docs = corpus_dataset()
    texts = zip(docs["chunk_id"], docs["text"], strict=True)
    write_documents(tmp_path, [{"id": i, "contents": t} for i, t in texts], append=False, store_raw=False)
    searcher = bm25_searcher(tmp_path, 1.2, 0.75)
    want = [(h.docid, h.score) for h in searcher.search("river France", 3)]
    searcher.close()
    assert got.ids == [pid for pid, _ in want]
    np.testing.assert_allclose(got.scores, [s for _, s in want], rtol=1e-6)


def test_mapping_faults_are_one_line(pushed):
    flavor, url, *_ = pushed
    retriever_cls = CLASSES[flavor][0]
    with pytest.raises(EngineError, match=r"^http://127\.0\.0\.1:\d+ \(nope\): no such index"):
        retriever_cls(corpus_dataset(), connection(url, "nope"), embedder=HashingEmbedder())
    with pytest.raises(EngineError, match="lacks: text → body"):
        retriever_cls(corpus_dataset(), connection(url, fields={"text": "body"}), embedder=HashingEmbedder())
    with pytest.raises(EngineError, match="holds 64-d vectors, the embedder makes 32-d"):
        retriever_cls(corpus_dataset(), connection(url), embedder=HashingEmbedder(32))
    with pytest.raises(EngineError, match="no such index to adopt"):
        adopt_index(corpus_dataset(), CLASSES[flavor][1](connection(url, "nope")), HashingEmbedder(), "here")


def test_refused_credentials_are_one_line_without_the_secret(pushed, monkeypatch):
    flavor, url, *_ = pushed
    monkeypatch.setenv(SECRET_ENV, "wb:wrong-pw-8812")
    start = time.perf_counter()
    with pytest.raises(EngineError, match=r"AuthenticationException \(HTTP 401\)") as err:
        CLASSES[flavor][0](corpus_dataset(), connection(url, retries=3, backoff_s=1.0), embedder=HashingEmbedder())
    assert "wrong-pw" not in str(err.value) and len(str(err.value).splitlines()) == 1
    assert time.perf_counter() - start < 1.0  # an answer of the engine is not retried


def test_an_elasticsearch_api_key_is_accepted(pushed, monkeypatch):
    flavor, url, *_ = pushed
    if flavor != "elasticsearch":
        pytest.skip("API keys: Elasticsearch's Authorization: ApiKey (OpenSearch takes a bearer token)")
    monkeypatch.setenv(SECRET_ENV, API_KEY)
    retriever = ElasticsearchRetriever(corpus_dataset(), connection(url, channel="lexical"))
    assert retriever.search(["Hamlet"], k=1)[0].ids == ["d2#0"]
    retriever.close()


def control(url: str, what: str, body: str) -> None:
    """Tell the stand-in to delay (``delay``) or fail (``fail``) its next searches."""
    import urllib.request

    urllib.request.urlopen(f"{url}/_standin/{what}", data=body.encode(), timeout=5).close()


def test_a_timeout_is_retried_then_one_line(pushed):
    flavor, url, *_ = pushed
    retriever = CLASSES[flavor][0](corpus_dataset(), connection(url, channel="lexical", timeout_s=0.3))
    control(url, "delay", '{"seconds": 1.0}')
    try:
        with pytest.raises(EngineError, match=r"lexical search failed after 2 tries: .*Timeout"):
            retriever.search(["Hamlet"], k=1)
    finally:
        control(url, "delay", '{"seconds": 0}')
    assert retriever.search(["Hamlet"], k=1)[0].ids == ["d2#0"]
    retriever.close()


def test_a_busy_engine_is_retried_and_another_answer_is_not(pushed):
    flavor, url, *_ = pushed
    retriever = CLASSES[flavor][0](corpus_dataset(), connection(url, channel="lexical", retries=2))
    control(url, "fail", '{"status": 503, "times": 2}')
    assert retriever.search(["Hamlet"], k=1)[0].ids == ["d2#0"]  # two 503s, then an answer: three tries
    control(url, "fail", '{"status": 503, "times": 3}')
    with pytest.raises(EngineError, match=r"lexical search failed after 3 tries: EngineBusy: .*\(HTTP 503\)$"):
        retriever.search(["Hamlet"], k=1)
    control(url, "fail", '{"status": 400, "times": 1}')
    with pytest.raises(EngineError, match=r"lexical search failed: .*\(HTTP 400\)$"):
        retriever.search(["Hamlet"], k=1)
    assert retriever.search(["Hamlet"], k=1)[0].ids == ["d2#0"]  # the 400 was answered once, not retried
    retriever.close()


def test_an_unreachable_engine_is_one_line(standin):
    import socket

    flavor, _ = standin
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    conn = Connection(f"http://wb:{SECRET}@127.0.0.1:{port}", "passages", retries=1, backoff_s=0.01, timeout_s=1)
    with pytest.raises(
        EngineError, match=rf"^http://wb:\*\*\*@127\.0\.0\.1:{port} \(passages\): connect failed"
    ) as err:
        CLASSES[flavor][0](corpus_dataset(), conn, embedder=HashingEmbedder())
    assert SECRET.split(":")[1] not in str(err.value)


@pytest.mark.parametrize("flavor", sorted(CLASSES))
def test_a_real_cluster(flavor, monkeypatch):
    """The same push / adopt / channels contract against a real cluster at ``$WORKBENCH_ES_URL`` /
    ``$WORKBENCH_OPENSEARCH_URL`` (credentials, if any, in ``$WORKBENCH_ES_CREDENTIALS`` /
    ``$WORKBENCH_OPENSEARCH_CREDENTIALS``: ``user:password`` or an API key); a fresh index, deleted afterwards."""
    url = os.environ.get(REAL_URL_ENV[flavor])
    if not url:
        pytest.skip(f"no real {flavor} cluster: set {REAL_URL_ENV[flavor]} to run this test against one")
    credentials = REAL_URL_ENV[flavor].replace("_URL", "_CREDENTIALS")
    conn = Connection(
        url,
        f"workbench-test-{uuid.uuid4().hex[:8]}",
        credentials_env=credentials if os.environ.get(credentials) else None,
    )
    writer = CLASSES[flavor][1](conn)
    try:
        check_push(*push_twice_and_adopt(flavor, conn))
        check_channels(flavor, conn)
    finally:
        writer._client.indices.delete(index=conn.index)
        writer.close()
