"""The ``http`` backend against ``serve-retriever`` on 127.0.0.1 (real uvicorn servers over the toy corpus): the client
retrieves what the in-process bm25 retrieves, a plain Search-R1-style client reads the answer, bad requests are one
line 4xx, an engine failing behind the server is a 503 that the client retries a bounded number of times, and the
answers a client cannot use are one line naming the URI without quoting the body."""

from __future__ import annotations

import math

import httpx
import numpy as np
import pytest

from tests.toy_corpus import corpus_dataset
from workbench.backends.cost import CostCounter
from workbench.backends.retrieval_engines import Connection, EngineError
from workbench.backends.retrieval_http import BadAnswer, HttpRetriever, endpoints, parse_answer
from workbench.backends.retrievers import BM25Retriever
from workbench.core.errors import ConfigError
from workbench.serve.retriever_app import RetrieverServeLimits, ServedIndex, start_in_thread

QUERIES = ["Who wrote Hamlet?", "Which river flows through Paris?", "market town in England", "zzzz qqqq", "Lyon"]
LIMITS = RetrieverServeLimits(max_queries=8, max_topk=5, default_topk=2, max_query_chars=200, max_body_bytes=4096)


@pytest.fixture(scope="module")
def corpus():
    return corpus_dataset()


@pytest.fixture(scope="module")
def local(corpus):
    return BM25Retriever(corpus, cache=False)


@pytest.fixture(scope="module")
def server(corpus, local):
    with start_in_thread(ServedIndex(local, corpus, "bm25", ("lexical",)), limits=LIMITS) as running:
        yield running


def lexical(uri: str, **settings) -> Connection:
    return Connection(uri, None, channel="lexical", **settings)


def test_the_client_retrieves_what_the_in_process_index_does(server, corpus, local):
    counter = CostCounter()
    engine = HttpRetriever(corpus, lexical(server.retrieve_url, batch_size=2, max_concurrency=2), counter=counter)
    assert engine.served["backend"] == "bm25" and engine.served["passages"] == 6
    got, want = engine.search(QUERIES, k=3), local.search(QUERIES, k=3)
    for g, w in zip(got, want, strict=True):
        assert g.ids == w.ids and list(g.indices) == list(w.indices)
        assert list(g.ranks) == list(range(1, len(w) + 1))
        np.testing.assert_allclose(g.scores, w.scores, rtol=1e-6)
    assert counter.retrieval_calls == len(QUERIES) and counter.seconds["retrieve"] > 0
    # three requests of at most two queries each; every hit carries the passage's fields
    hits = engine._post(["Who wrote Hamlet?"], 1)
    assert hits == [[("d2#0", pytest.approx(float(want[0].scores[0])), {
        "text": "Hamlet is a tragedy written by William Shakespeare around 1600.",
        "title": "Hamlet",
        "doc_id": "d2",
    })]]  # fmt: skip
    assert httpx.get(f"{server.url}/health").json()["requests"] >= 3
    engine.close()


def test_a_search_r1_client_reads_the_answer(server, local):
    body = {"queries": ["Who wrote Hamlet?", "Which river flows through Paris?"], "topk": 2, "return_scores": True}
    result = httpx.post(server.retrieve_url, json=body).json()["result"]
    assert len(result) == 2 and len(result[1]) == 2
    first = result[0][0]
    content = first["document"]["contents"]
    title, text = content.split("\n")[0], "\n".join(content.split("\n")[1:])  # what Search-R1's client does
    assert (title, first["document"]["id"]) == ('"Hamlet"', "d2#0") and text.startswith("Hamlet is a tragedy")
    assert isinstance(first["score"], float) and result[1][0]["score"] >= result[1][1]["score"]
    # without scores: the documents themselves; topk null or 0: the server's default (2)
    bare = httpx.post(server.retrieve_url, json={"queries": ["river Seine Paris France"], "topk": None}).json()
    assert [doc["id"] for doc in bare["result"][0]] == local.search(["river Seine Paris France"], 2)[0].ids
    zero = httpx.post(server.retrieve_url, json={"queries": ["river Seine Paris France"], "topk": 0}).json()
    assert zero == bare
    assert httpx.post(server.retrieve_url, json={"queries": []}).json() == {"result": []}


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"queries": ["a"], "k": 3}, 422, "unknown field 'k'"),
        ({"queries": ["a"], "topk": 6}, 422, "topk: 6 is outside 0..5"),
        ({"queries": ["a"], "topk": -1}, 422, "topk: -1 is outside"),
        ({"queries": ["a"], "topk": 10**30}, 422, "more than 18 digits"),
        ({"queries": ["a"] * 9}, 422, "queries: 9 queries, at most 8 per request"),
        ({"queries": "Who wrote Hamlet?"}, 422, "queries: Input should be a valid list"),
        ({"queries": [3]}, 422, "queries[0]: Input should be a valid string"),
        ({"queries": ["a"], "topk": "3"}, 422, "topk: Input should be a valid integer"),
        ({"queries": ["a"], "return_scores": 1}, 422, "return_scores: Input should be a valid boolean"),
        ({"queries": ["a" * 201]}, 422, "queries[0]: 201 characters, at most 200"),
        ({"queries": ["ok", "\ud800"]}, 422, "queries[1]: not Unicode text"),
        ({"topk": 2}, 422, "queries: Field required"),
        ({"queries": ["a" * 600] * 8}, 413, "exceeds the 4096-byte limit"),
    ],
)
def test_bad_requests_are_one_line_4xx(server, body, status, says):
    import json

    response = httpx.post(
        server.retrieve_url, content=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    detail = response.json()["detail"]
    assert response.status_code == status and says in detail and "\n" not in detail, detail


def test_malformed_bodies_routes_and_methods_are_one_line_4xx(server):
    strict = {"content-type": "application/json"}
    for content, says in [
        (b'{"queries": ["a"], "queries": ["b"]}', "duplicate key 'queries'"),
        (b'{"queries": ["a"], "topk": NaN}', "malformed JSON body"),
        (b"not json", "malformed JSON body"),
    ]:
        response = httpx.post(server.retrieve_url, content=content, headers=strict)
        assert response.status_code == 422 and says in response.json()["detail"], response.text
    assert httpx.get(server.retrieve_url).status_code == 405
    missing = httpx.post(f"{server.url}/search", json={"queries": []})
    assert missing.status_code == 404 and "POST /retrieve" in missing.json()["detail"]


def test_an_engine_failing_behind_the_server_is_a_503_retried_then_one_line(corpus, local):
    """A serve-retriever whose backend is itself ``http`` (to a bm25 server): once that server is gone, every search
    fails, the front server answers 503 with the engine's one-line error, and the client tries 1 + retries times."""
    upstream = start_in_thread(ServedIndex(local, corpus, "bm25", ("lexical",)))
    quick = lexical(upstream.retrieve_url, retries=0, timeout_s=2)
    proxied = HttpRetriever(corpus, quick)
    with start_in_thread(ServedIndex(proxied, corpus, "http", ("lexical",))) as front:
        client = HttpRetriever(corpus, lexical(front.retrieve_url, retries=2, backoff_s=0.01))
        assert client.search(["Who wrote Hamlet?"], k=1)[0].ids == ["d2#0"]
        upstream.stop()
        failed = httpx.post(front.retrieve_url, json={"queries": ["Who wrote Hamlet?"]})
        assert failed.status_code == 503 and upstream.retrieve_url in failed.json()["detail"]
        with pytest.raises(EngineError) as caught:
            client.search(["Who wrote Hamlet?"], k=1)
        message = str(caught.value)
        assert message.startswith(f"{front.retrieve_url}: retrieve failed after 3 tries: RetryableStatus: HTTP 503")
        assert "\n" not in message
        health = httpx.get(f"{front.url}/health").json()
        assert health["failures"] == 4 and "ConnectError" in health["last_error"]  # 1 direct + 3 tries
        client.close()
    proxied.close()


def test_unreachable_servers_channels_and_credentials(server, corpus, monkeypatch):
    closed = lexical("http://reader:pw-9f1c@127.0.0.1:9/retrieve", retries=1, backoff_s=0.01, timeout_s=1)
    with pytest.raises(EngineError) as caught:
        HttpRetriever(corpus, closed)
    message = str(caught.value)
    assert message.startswith("http://reader:***@127.0.0.1:9/retrieve: connect failed after 2 tries: ConnectError")
    assert "pw-9f1c" not in message
    with pytest.raises(ConfigError, match=r"channel: the server at .* searches lexical, the recipe declares dense"):
        HttpRetriever(corpus, Connection(server.retrieve_url, None, channel="dense"))
    monkeypatch.setenv("WB_TEST_RETRIEVER_TOKEN", "tok-5e3a")
    with_token = HttpRetriever(corpus, lexical(server.url, credentials_env="WB_TEST_RETRIEVER_TOKEN"))
    assert with_token._client.headers["authorization"] == "Bearer tok-5e3a"
    assert with_token.url == server.retrieve_url  # a server's root URI gets /retrieve
    with_token.close()
    monkeypatch.delenv("WB_TEST_RETRIEVER_TOKEN")
    with pytest.raises(EngineError, match=r"WB_TEST_RETRIEVER_TOKEN .* is not set"):
        HttpRetriever(corpus, lexical(server.url, credentials_env="WB_TEST_RETRIEVER_TOKEN"))


def test_uris():
    assert endpoints("http://h:8000/retrieve") == ("http://h:8000/retrieve", "http://h:8000/health")
    assert endpoints("https://h/rag/retrieve/") == ("https://h/rag/retrieve", "https://h/rag/health")
    assert endpoints("http://h:8000") == ("http://h:8000/retrieve", "http://h:8000/health")
    with pytest.raises(ConfigError, match="http"):
        endpoints("ftp://h/retrieve")


def test_answers_in_both_document_shapes_are_read():
    flashrag = {"document": {"id": 7, "contents": '"Aaron"\nAaron is a prophet.\nSecond line.'}, "score": 3}
    split = {"document": {"id": "p1", "title": "T", "text": "body", "doc_id": "d"}, "score": 0.5}
    assert parse_answer({"result": [[flashrag, split]]}, 1, 5) == [
        [("7", 3.0, {"text": "Aaron is a prophet.\nSecond line.", "title": "Aaron"}),
         ("p1", 0.5, {"text": "body", "title": "T", "doc_id": "d"})]
    ]  # fmt: skip
    unquoted = {"document": {"id": "x", "contents": "Plain title\ntext"}, "score": 1.0}
    assert parse_answer([[unquoted], []], 2, 1) == [[("x", 1.0, {"text": "text", "title": "Plain title"})], []]
    assert len(parse_answer({"result": [[split, split, split]]}, 1, 2)[0]) == 2  # at most k


SECRETISH = "<script>never-echoed</script>"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"results": []}, 'no "result" list'),
        ({"result": [[]]}, "1 result list(s) for 2 queries"),
        ({"result": [SECRETISH, []]}, "result[0] is not a list of hits"),
        ({"result": [[{"id": SECRETISH, "contents": "x"}], []]}, "result[0][0] is not"),
        ({"result": [[{"document": {"contents": SECRETISH}, "score": 1}], []]}, "result[0][0].document has no id"),
        ({"result": [[], [{"document": {"id": "a", "contents": "x"}, "score": math.nan}]]}, "result[1][0].score"),
        ({"result": [[], [{"document": {"id": "a", "contents": "x"}, "score": True}]]}, "result[1][0].score"),
        ({"result": [[{"document": {"id": "a", "body": SECRETISH}, "score": 1}], []]}, 'neither "contents" nor'),
    ],
)
def test_answers_that_are_not_the_shape_are_named_without_quoting_them(body, says):
    with pytest.raises(BadAnswer) as caught:
        parse_answer(body, 2, 3)
    assert says in str(caught.value) and SECRETISH not in str(caught.value)


def test_a_recipe_names_the_http_backend_without_an_index(tmp_path):
    from workbench.recipe import load_recipe

    path = tmp_path / "r.yaml"
    head = "name: demo\nstages: [build_data]\nretrieval:\n  backend: http\n"
    path.write_text(head + "  connection: {uri: 'http://h:8000/retrieve', channel: lexical}\n")
    connection = load_recipe(str(path), []).config.retrieval.connection
    assert (connection.uri, connection.index, connection.channel) == ("http://h:8000/retrieve", None, "lexical")
    from workbench.stages.index_engine import open_writer

    with pytest.raises(ConfigError, match=r"http is reached through a server that holds its own index: `workbench in"):
        open_writer(load_recipe(str(path), []).config)
    path.write_text(head + "  connection: {uri: 'grpc://h:8000'}\n")
    with pytest.raises(ConfigError, match=r"retrieval.connection.uri: backend http speaks http, https URIs"):
        load_recipe(str(path), [])


def _foreign_server():
    """A stand-in for another kind of retriever server (no workbench /health): it wants the bearer token
    ``tok-77``, answers ``/retrieve`` in Search-R1's shape (contents only, scores as ints) and ``/broken/retrieve``
    with JSON that is not the shape, quoting a value that must never reach an error message."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route

    tries = {"broken": 0}

    async def retrieve(request):
        if request.headers.get("authorization") != "Bearer tok-77":
            return PlainTextResponse("no", status_code=401)
        body = await request.json()
        hits = [{"document": {"id": "d2#0", "contents": '"Hamlet"\nHamlet is a tragedy.'}, "score": 7}]
        return JSONResponse({"result": [hits[: body["topk"]] for _ in body["queries"]]})

    async def broken(request):
        tries["broken"] += 1
        return JSONResponse({"result": SECRETISH})

    async def health(request):
        return PlainTextResponse("fine")

    routes = [Route("/retrieve", retrieve, methods=["POST"]), Route("/broken/retrieve", broken, methods=["POST"])]
    routes += [Route("/health", health), Route("/broken/health", health)]
    return Starlette(routes=routes), tries


def test_another_servers_answers_tokens_and_refusals(corpus, monkeypatch):
    from workbench.serve.uvicorn_run import ServerThread

    app, tries = _foreign_server()
    with ServerThread(app, host="127.0.0.1", port=0, name="foreign").start(10) as foreign:
        monkeypatch.setenv("WB_TEST_RETRIEVER_TOKEN", "tok-77")
        settings = {"credentials_env": "WB_TEST_RETRIEVER_TOKEN", "retries": 2, "backoff_s": 0.01}
        engine = HttpRetriever(corpus, Connection(f"{foreign.url}/retrieve", None, **settings))
        assert engine.served is None  # not a serve-retriever: its channel cannot be checked
        (hit,) = engine.search(["Who wrote Hamlet?"], k=1)
        assert (hit.ids, list(hit.scores), list(hit.indices)) == (["d2#0"], [7.0], [2])
        broken = HttpRetriever(corpus, Connection(f"{foreign.url}/broken/retrieve", None, **settings))
        with pytest.raises(EngineError) as caught:
            broken.search(["Who wrote Hamlet?"], k=1)
        message = str(caught.value)
        assert message == f'{foreign.url}/broken/retrieve: retrieve failed: BadAnswer: the answer has no "result" list'
        assert tries["broken"] == 1  # an answer that is not the shape is not retried
        monkeypatch.setenv("WB_TEST_RETRIEVER_TOKEN", "wrong-token")
        refusing = HttpRetriever(corpus, Connection(f"{foreign.url}/retrieve", None, **settings))
        with pytest.raises(EngineError) as refused:
            refusing.search(["Who wrote Hamlet?"], k=1)
        assert "retrieve failed: RefusedStatus: HTTP 401 Unauthorized: the credentials were refused" in str(
            refused.value
        )
        assert "wrong-token" not in str(refused.value)
        for client in (engine, broken, refusing):
            client.close()


def test_serve_retriever_serves_an_engine_on_its_dense_channel(pg_server):
    """``serve-retriever`` over pgvector (a real PostgreSQL, vectors from the hashing embedder on the server's side):
    the http client, which embeds nothing, gets the ids and scores the pgvector backend gets directly."""
    from tests.engine_servers import fresh_database
    from tests.unit.engines.conftest import HashingEmbedder
    from workbench.backends.retrieval_pgvector import PgvectorIndex, PgvectorRetriever
    from workbench.stages.index_engine import push_corpus

    corpus = corpus_dataset()
    connection = Connection(fresh_database(pg_server, "http_tests"), "passages")
    writer = PgvectorIndex(connection)
    push_corpus(corpus, writer, HashingEmbedder(), batch_size=6)
    writer.close()
    direct = PgvectorRetriever(corpus, connection, embedder=HashingEmbedder())
    with start_in_thread(ServedIndex(direct, corpus, "pgvector", ("dense",), "passages")) as server:
        health = httpx.get(f"{server.url}/health").json()
        assert (health["backend"], health["channels"], health["index"]) == ("pgvector", ["dense"], "passages")
        client = HttpRetriever(corpus, Connection(server.retrieve_url, "wiki", channel="dense"))
        got = client.search(QUERIES[:3], k=3)
        want = direct.search(QUERIES[:3], k=3)
        for g, w in zip(got, want, strict=True):
            assert g.ids == w.ids
            np.testing.assert_allclose(g.scores, w.scores, rtol=1e-6)
        client.close()
    direct.close()


def test_a_server_shutting_down_answers_503(corpus, local):
    with start_in_thread(ServedIndex(local, corpus, "bm25", ("lexical",))) as server:
        server.app.state.close()  # what uvicorn's shutdown calls first
        response = httpx.post(server.retrieve_url, json={"queries": ["Who wrote Hamlet?"]})
        assert response.status_code == 503 and response.json() == {"detail": "shutting down"}


def test_passages_outside_the_runs_corpus_come_back_with_their_text(corpus):
    """A server holding documents the run's corpus lacks (a production index): its passages join the retriever's
    table with the text the server sent, and a serve-retriever in front of that client serves them too."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route

    from workbench.serve.uvicorn_run import ServerThread

    async def retrieve(request):
        body = await request.json()
        hit = {
            "document": {"id": "w9#0", "contents": '"Loire"\nThe Loire is the longest river in France.'},
            "score": 3.5,
        }
        return JSONResponse({"result": [[hit] for _ in body["queries"]]})

    async def health(request):
        return PlainTextResponse("fine")

    app = Starlette(routes=[Route("/retrieve", retrieve, methods=["POST"]), Route("/health", health)])
    with ServerThread(app, host="127.0.0.1", port=0, name="wide").start(10) as wide:
        engine = HttpRetriever(corpus, lexical(f"{wide.url}/retrieve"))
        (hit,) = engine.search(["longest river in France"], k=1)
        row = int(hit.indices[0])
        assert hit.ids == ["w9#0"] and row == len(corpus)  # appended after the corpus's rows
        table = engine.passages
        assert (table["title"][row], table["text"][row], table["doc_id"][row]) == (
            "Loire",
            "The Loire is the longest river in France.",
            "w9",
        )
        with start_in_thread(ServedIndex(engine, corpus, "http", ("lexical",)), limits=LIMITS) as front:
            answer = httpx.post(front.retrieve_url, json={"queries": ["Loire"], "topk": 1, "return_scores": True})
            (document,) = [hit["document"] for hit in answer.json()["result"][0]]
            assert document["id"] == "w9#0" and document["text"] == "The Loire is the longest river in France."
        engine.close()
