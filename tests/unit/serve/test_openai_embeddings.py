"""``serve-model``'s ``POST /v1/embeddings`` over a live server on the tiny encoder: the answer's shape (JSON numbers
and base64), ``/v1/models`` and ``/health`` naming the embedder, and every bad request a one-line 4xx."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")

NAME = "tiny-embed"


@pytest.fixture(scope="module")
def local(tiny_encoder_dir):
    from workbench.backends.embedder import Embedder

    return Embedder(str(tiny_encoder_dir), cache=False)


@pytest.fixture(scope="module")
def server(tiny_lm_dir, local):
    from dataclasses import replace

    from workbench.serve.openai_server import ModelServeLimits, start_in_thread

    limits = replace(ModelServeLimits(), max_embed_inputs=3, max_body_bytes=4096)
    with start_in_thread(str(tiny_lm_dir), served_name="tiny", embedder=local, embedder_name=NAME, limits=limits) as s:
        yield s


def _post(server, body):
    """POST ``body`` as JSON with ASCII escapes (so a lone surrogate travels as ``\\ud800``)."""
    headers = {"Content-Type": "application/json"}
    return httpx.post(f"{server.base_url}/embeddings", content=json.dumps(body), headers=headers, timeout=30)


def test_answer_is_the_in_process_vectors_as_numbers_or_base64(server, local):
    texts = ["a cat", "a dog on a log"]
    want = local.encode(texts)
    answer = _post(server, {"model": NAME, "input": texts, "user": "ignored"}).json()
    assert answer["object"] == "list" and answer["model"] == NAME
    assert [d["index"] for d in answer["data"]] == [0, 1] and answer["usage"]["prompt_tokens"] > 0
    np.testing.assert_array_equal(np.asarray([d["embedding"] for d in answer["data"]], dtype=np.float32), want)
    packed = _post(server, {"model": NAME, "input": "a cat", "encoding_format": "base64"}).json()["data"][0]
    # the same single input in-process: a batch's padding may change the float summation order of "a cat"'s vector
    alone = local.encode(["a cat"])[0]
    np.testing.assert_array_equal(np.frombuffer(base64.b64decode(packed["embedding"]), "<f4"), alone)
    assert _post(server, {"model": NAME, "input": "a cat", "dimensions": local.dim}).status_code == 200


def test_models_and_health_name_the_embedder(server, local):
    cards = {c["id"]: c for c in httpx.get(f"{server.base_url}/models").json()["data"]}
    assert set(cards) == {"tiny", NAME} and cards[NAME]["dimensions"] == local.dim
    assert httpx.get(f"{server.base_url}/models/{NAME}").json()["id"] == NAME
    assert httpx.get(f"{server.url}/health").json()["embedder"] == NAME


@pytest.mark.parametrize(
    ("body", "status", "param", "words"),
    [
        ({"model": "tiny", "input": "x"}, 404, "model", "serves 'tiny-embed'"),
        ({"model": NAME, "input": []}, 400, "input", "must not be empty"),
        ({"model": NAME, "input": [1, 2, 3]}, 400, "input", "token ids are not taken"),
        ({"model": NAME, "input": ["a", "b", "c", "d"]}, 400, "input", "at most 3 inputs"),
        ({"model": NAME, "input": "\ud800"}, 400, "input", "lone surrogate"),
        ({"model": NAME, "input": "x", "encoding_format": "int8"}, 400, "encoding_format", "float, base64"),
        ({"model": NAME, "input": "x", "dimensions": 10**30}, 400, "dimensions", "more than 18 digits"),
        ({"model": NAME}, 422, "input", "Field required"),
        ({"model": NAME, "input": 5}, 422, "input", "input"),
        ({"model": NAME, "input": "x", "dimensions": "32"}, 422, "dimensions", "dimensions"),
    ],
)
def test_bad_requests_are_one_line_4xx(server, body, status, param, words):
    response = _post(server, body)
    error = response.json()["error"]
    assert response.status_code == status, error
    assert str(error["param"]).split(".")[0] == param and words in error["message"] and "\n" not in error["message"]


def test_bodies_that_are_not_strict_json_or_too_large(server):
    headers = {"Content-Type": "application/json"}
    repeated = httpx.post(
        f"{server.base_url}/embeddings", content=b'{"model": "x", "model": "tiny-embed", "input": "a"}', headers=headers
    )
    assert repeated.status_code == 422 and "malformed JSON body" in repeated.json()["error"]["message"]
    nan = httpx.post(f"{server.base_url}/embeddings", content=b'{"model": "tiny-embed", "input": NaN}', headers=headers)
    assert nan.status_code == 422
    huge = _post(server, {"model": NAME, "input": "word " * 2000})
    assert huge.status_code == 413


def test_a_server_without_an_embedder_says_so(tiny_lm_dir):
    from workbench.serve.openai_server import start_in_thread

    with start_in_thread(str(tiny_lm_dir), served_name="tiny") as bare:
        response = httpx.post(f"{bare.base_url}/embeddings", json={"model": "minilm", "input": "x"})
        assert response.status_code == 404 and "serves no embedder" in response.json()["error"]["message"]
        assert [c["id"] for c in httpx.get(f"{bare.base_url}/models").json()["data"]] == ["tiny"]
