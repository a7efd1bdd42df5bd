"""``embedder.backend: openai`` (workbench.backends.served_embedder): parity with the in-process embedder through a
live ``serve-model`` on the tiny encoder, batching and concurrency, the cache and its guard against a swapped model,
and every bad answer retried, then refused in one line naming the URL (a tiny stand-in server for those)."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

pytest.importorskip("httpx")

from workbench.backends.factory import build_served_embedder
from workbench.backends.served_client import ServedModelError
from workbench.backends.served_embedder import PROBE_TEXTS, compare_embedding_probes
from workbench.core.errors import DataError

TEXTS = [
    f"passage {i}: the {w} sat on the mat" for i, w in enumerate(["cat", "dog", "owl", "fox", "elk", "cow", "ant"])
]
PARITY = 1e-5  # cosine distance


@pytest.fixture(scope="module")
def local(tiny_encoder_dir):
    from workbench.backends.embedder import Embedder

    return Embedder(str(tiny_encoder_dir), cache=False)


@pytest.fixture(scope="module")
def server(tiny_lm_dir, local):
    from workbench.serve.openai_server import start_in_thread

    with start_in_thread(str(tiny_lm_dir), served_name="tiny", embedder=local, embedder_name="tiny-embed") as srv:
        yield srv


def _cosine_distance(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(1.0 - np.sum(a * b, axis=1)))


@pytest.mark.parametrize("encoding_format", ["float", "base64"])
def test_served_vectors_equal_the_in_process_embedder(server, local, encoding_format):
    served = build_served_embedder(
        base_url=server.base_url, model="tiny-embed", batch_size=3, cache=False, encoding_format=encoding_format
    )
    got, want = served.encode(TEXTS), local.encode(TEXTS)
    assert got.shape == want.shape == (len(TEXTS), local.dim) and got.dtype == np.float32
    assert served.dim == local.dim
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)  # normalised as in-process
    assert _cosine_distance(got, want) <= PARITY
    assert served.counter.embed_texts == len(TEXTS)
    assert served.encode([]).shape == (0, local.dim)
    with pytest.raises(DataError, match="not one string"):
        served.encode("one text")


def test_cache_serves_repeats_and_the_fingerprint_names_the_served_model(server, local):
    first = build_served_embedder(base_url=server.base_url, model="tiny-embed", batch_size=4)
    vectors = first.encode(TEXTS)
    again = build_served_embedder(base_url=server.base_url, model="tiny-embed", batch_size=4)
    np.testing.assert_array_equal(again.encode(TEXTS), vectors)
    assert again.counter.cache_hits == len(TEXTS) and again.counter.embed_texts == 0
    assert again.fingerprint == first.fingerprint != local.fingerprint


def test_a_model_the_server_does_not_embed_with_is_one_line(server):
    with pytest.raises(ServedModelError) as caught:
        build_served_embedder(base_url=server.base_url, model="nope", retries=0, cache=False)
    message = str(caught.value)
    assert "\n" not in message and server.base_url in message and "model_not_found" not in message
    assert "HTTP 404" in message and "'nope'" in message


# ---------------------------------------------------------------------------------------------------- a stand-in


def _vector(text: str, dim: int, salt: str = "") -> list[float]:
    digest = hashlib.sha256((salt + text).encode()).digest()
    return [b / 255.0 - 0.5 for b in digest[:dim]]


class StandIn:
    """A minimal ``/v1/embeddings`` server: deterministic vectors of ``dim`` numbers, answers to the probe texts
    always good, every other request answered as ``mode`` says; counts requests and the most in flight."""

    def __init__(self, mode: str = "good", dim: int = 4, salt: str = "", delay: float = 0.0) -> None:
        self.mode, self.dim, self.salt, self.delay = mode, dim, salt, delay
        self.requests, self.in_flight, self.most_in_flight = 0, 0, 0
        self._lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, answer = stand_in.answer(body)
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, body: dict) -> tuple[int, object]:
        texts = body["input"]
        good = {
            "object": "list",
            "model": body["model"],
            "data": [
                {"object": "embedding", "index": i, "embedding": _vector(t, self.dim, self.salt)}
                for i, t in enumerate(texts)
            ],
        }
        if texts == list(PROBE_TEXTS):
            return 200, good
        with self._lock:
            self.requests += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(self.delay)
            return self._bad(good, texts)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _bad(self, good: dict, texts: list[str]) -> tuple[int, object]:
        data = good["data"]
        if self.mode == "reversed":  # a legal answer: items out of order, placed by their index
            return 200, {**good, "data": data[::-1]}
        if self.mode == "nan":
            return 200, b'{"data": [' + b",".join(
                b'{"index": %d, "embedding": [NaN, 1, 2, 3]}' % i for i in range(len(texts))
            ) + b"]}"
        if self.mode == "count":
            return 200, {**good, "data": data[:-1]}
        if self.mode == "dim":
            return 200, {**good, "data": [{**d, "embedding": d["embedding"][:-1]} for d in data]}
        if self.mode == "index":
            return 200, {**good, "data": [{**d, "index": 0} for d in data]}
        if self.mode == "model":
            return 200, {**good, "model": "another"}
        if self.mode == "500":
            return 500, {"error": {"message": "the GPU fell over"}}
        if self.mode == "400":
            return 400, {"error": {"message": "input too long"}}
        if self.mode == "slow":
            time.sleep(1.0)
        return 200, good

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def stand_in():
    servers: list[StandIn] = []

    def start(*args, **kwargs) -> StandIn:
        servers.append(StandIn(*args, **kwargs))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def test_batches_go_concurrently_in_order_and_items_are_placed_by_index(stand_in):
    server = stand_in("reversed", delay=0.2)
    embedder = build_served_embedder(base_url=server.base_url, model="m", batch_size=2, max_concurrency=4, cache=False)
    got = embedder.encode(TEXTS)
    want = np.asarray([_vector(t, 4) for t in TEXTS], dtype=np.float64)
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert server.requests == 4  # 7 texts, 2 a request
    assert server.most_in_flight >= 2  # several requests in flight at once


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("nan", "not finite"),
        ("count", "'data' holds 1 embeddings for 2 inputs"),
        ("dim", "has 3 dimensions, not 4"),
        ("index", "'index' fields are not 0..1 once each"),
        ("model", "another model's"),
        ("500", "HTTP 500: the GPU fell over"),
        ("slow", "timed out"),
    ],
)
def test_a_bad_answer_is_retried_then_refused_in_one_line(stand_in, mode, why):
    server = stand_in(mode)
    embedder = build_served_embedder(
        base_url=server.base_url, model="m", retries=1, timeout_s=0.5, cache=False, batch_size=2
    )
    with pytest.raises(ServedModelError) as caught:
        embedder.encode(["a text", "another text"])
    message = str(caught.value)
    assert "\n" not in message and server.base_url in message and why in message, message
    assert "an embeddings request (2 text(s)) failed" in message
    assert server.requests == 2  # the first attempt and one retry


def test_a_client_error_is_not_retried(stand_in):
    server = stand_in("400")
    embedder = build_served_embedder(base_url=server.base_url, model="m", retries=3, cache=False)
    with pytest.raises(ServedModelError, match="HTTP 400: input too long"):
        embedder.encode(["x"])
    assert server.requests == 1


def test_another_model_under_a_cached_name_is_refused(stand_in):
    build_served_embedder(base_url=stand_in().base_url, model="same-name").encode(["cached"])
    swapped = stand_in(salt="other weights")
    with pytest.raises(DataError, match="is not the one whose vectors are cached") as caught:
        build_served_embedder(base_url=swapped.base_url, model="same-name")
    assert "\n" not in str(caught.value)
    build_served_embedder(base_url=swapped.base_url, model="same-name", cache=False)  # no cache: nothing to guard


def test_probe_comparison():
    texts = list(PROBE_TEXTS)
    rows = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    same = {"texts": texts, "vectors": [[1.0, 1e-5, 0.0], [0.0, 1.0, 0.0]]}
    assert compare_embedding_probes({"texts": texts, "vectors": rows}, same) is None
    other = {"texts": texts, "vectors": [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]}
    assert "probe vectors differ" in compare_embedding_probes({"texts": texts, "vectors": rows}, other)
    shorter = {"texts": texts, "vectors": [[1.0, 0.0], [0.0, 1.0]]}
    assert "dimension 2" in compare_embedding_probes({"texts": texts, "vectors": rows}, shorter)
    assert "probe texts differ" in compare_embedding_probes({"texts": texts, "vectors": rows}, {"texts": ["x"]})


def test_an_unset_key_variable_names_the_embedder_section(monkeypatch):
    monkeypatch.delenv("WB_TEST_EMBED_KEY", raising=False)
    with pytest.raises(ServedModelError, match=r"set embedder\.api_key_env: null"):
        build_served_embedder(base_url="http://127.0.0.1:9/v1", model="m", api_key_env="WB_TEST_EMBED_KEY")
