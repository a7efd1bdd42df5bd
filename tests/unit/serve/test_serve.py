"""The HTTP API (workbench.serve) against a live uvicorn server on a free localhost port, with a fake runtime.

The fake runtime (tests/unit/serve/fake_runtime.py) has the Runtime interface and no model; special questions make it
fail or stall, so one server covers most cases. The load attacks (queue, deadline, disconnects, batching) are in
test_serve_load.py.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from tests.unit.serve.fake_runtime import FakeRuntime, serving
from workbench.core.errors import ConfigError
from workbench.serve import ServeLimits, create_app, run_load, run_server

LIMITS = ServeLimits(max_batch=4, max_body_bytes=4096, max_question_chars=100, max_question_tokens=40)
ANSWER_FIELDS = ("question", "text", "retrieved", "p_correct", "passages", "lm_calls", "tokens", "latency_s")


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[str, FakeRuntime, httpx.Client]]:
    """A live server on a free localhost port (small limits), its fake runtime, and an HTTP client."""
    runtime = FakeRuntime()
    with serving(create_app(runtime, LIMITS)) as url, httpx.Client(base_url=url, timeout=10) as client:
        yield url, runtime, client


def _detail(response: httpx.Response) -> str:
    assert response.headers["content-type"].startswith("application/json")
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail and "\n" not in detail
    return detail


# ---------------------------------------------------------------------------------------------------- routes


def test_health(live):
    _, _, client = live
    deadline = time.monotonic() + 10
    while client.get("/ready").status_code != 200:  # the fake's warm-up takes no time, on a thread of its own
        assert time.monotonic() < deadline, "never ready"
        time.sleep(0.01)
    response = client.get("/health")
    assert response.status_code == 200
    body = response.json()
    queue = body.pop("queue")
    ood = body.pop("ood")
    assert body == {
        "status": "ok",
        "ready": True,  # test_readiness.py: before the warm-up is done
        "bundle": "fake-bundle",
        "version": "1.2.3",
        "methods": ["dtr", "d2rag"],
        "retriever": None,  # an in-process retriever (tests/unit/engines/test_external_bundle.py: an engine's)
    }
    fields = {"queued", "queued_requests", "running", "limit", "batches", "answered", "dropped", "interrupted"}
    assert set(queue) == fields
    assert queue["limit"] == LIMITS.max_queue and queue["queued"] == 0
    assert set(ood) == {"checked", "flagged", "reported", "retrieved", "refused"}


def test_methods_lists_settings_default_and_decision(live):
    _, _, client = live
    body = client.get("/methods").json()
    assert body["default"] == "d2rag"
    assert [(m["name"], m["default"], m["options"]) for m in body["methods"]] == [
        ("dtr", False, {"k": 3}),
        ("d2rag", True, {"k": 5, "tau": 0.4}),
    ]
    assert body["decision"]["tau"] == 0.4 and body["decision"]["features"] == ["entropy", "length"]


def test_answer_single_question_uses_default_method(live):
    _, runtime, client = live
    response = client.post("/answer", json={"question": "Who wrote Dune?"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["bundle"], body["version"], body["method"]) == ("fake-bundle", "1.2.3", "d2rag")
    [answer] = body["answers"]
    assert set(ANSWER_FIELDS) <= set(answer)
    assert answer["text"] == "answer to Who wrote Dune?" and answer["p_correct"] == 0.75
    assert "trace" not in answer
    assert answer["features"] == {"entropy": None, "length": 15.0}  # NaN is not JSON: sent as null
    assert runtime.calls[-1] == (["Who wrote Dune?"], "d2rag")


def test_answer_batch_with_method_and_traces(live):
    _, runtime, client = live
    questions = ["q one", "q two", "q three", "q four"]  # exactly max_batch
    response = client.post("/answer", json={"questions": questions, "method": "dtr", "traces": True})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["method"] == "dtr"
    assert [a["question"] for a in body["answers"]] == questions
    assert all(a["retrieved"] and a["passages"] == [{"id": "doc1#0", "title": "Doc one"}] for a in body["answers"])
    assert body["answers"][2]["trace"]["question"] == "q three"
    assert runtime.calls[-1] == (questions, "dtr")


def test_openapi_describes_the_routes_and_every_status(live):
    _, _, client = live
    spec = client.get("/openapi.json").json()
    assert spec["info"]["title"] == "workbench — fake-bundle 1.2.3"
    assert {"/health", "/methods", "/answer"} <= set(spec["paths"])
    assert "post" in spec["paths"]["/answer"] and "get" in spec["paths"]["/health"]
    assert {"413", "422", "500", "503", "504"} <= set(spec["paths"]["/answer"]["post"]["responses"])
    for status in ("422", "413", "503", "504", "404", "405", "500"):
        assert status in spec["info"]["description"]


_REFERENCE = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']""")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_everything_from_the_server_itself(live, page):
    """Offline, a page that loads its scripts from a CDN is blank: every script, style and icon must be local."""
    _, _, client = live
    response = client.get(page)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    assert "/openapi.json" in response.text
    references = _REFERENCE.findall(response.text)
    assert any(ref.endswith(".js") for ref in references), references
    assert not re.search(r"https?://", response.text), "the page names another host"
    for ref in references:
        assert ref.startswith("/"), ref
        asset = client.get(ref)
        assert asset.status_code == 200, ref
        if ref.endswith(".js"):
            assert "javascript" in asset.headers["content-type"] and len(asset.content) > 100_000
        elif ref.endswith(".css"):
            assert asset.headers["content-type"].startswith("text/css") and len(asset.content) > 10_000


def test_swagger_ui_assets_read_openapi_3_1(live):
    # FastAPI writes OpenAPI 3.1; Swagger UI before 5 renders such a spec as an error page.
    _, _, client = live
    assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
    assert b"isOAS31" in client.get("/docs/assets/swagger-ui-bundle.js").content
    missing = client.get("/docs/assets/nope.js")
    assert missing.status_code == 404 and "/docs/assets/nope.js" in _detail(missing)


# ---------------------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"question": ""}, "question"),
        ({"question": "   "}, "blank"),
        ({"question": "\u200b\u200c\u200d\u2060\ufeff"}, "blank"),
        ({"questions": ["fine", " \u200b\u3164\u0301 "]}, "questions[1]: must not be blank"),
        ({"question": "\U0001f600" * 20}, "question: 80 tokens, over the 40-token limit"),
        ({"questions": ["fine", "\U0001f914?" * 12]}, "questions[1]: 51 tokens"),
        ({"question": "x" * 101}, "at most 100 characters"),
        ({"questions": ["ok", "x" * 101]}, "questions[1]"),
        ({"questions": ["q"] * 5}, "at most 4"),
        ({"questions": []}, "at least 1"),
        ({"question": "a", "questions": ["b"]}, "exactly one"),
        ({}, "exactly one"),
        ({"method": "dtr"}, "exactly one"),
        ({"question": "a", "answers": ["x"]}, "unknown field 'answers'"),
        ({"question": "a", "method": "bm25"}, "dtr, d2rag"),
        ({"question": 5}, "valid string"),
        ({"question": "a", "traces": "yes"}, "valid boolean"),
        (["a question"], "body"),
    ],
    ids=[
        "empty",
        "blank",
        "zero-width-only",
        "invisible-in-batch",
        "emoji-over-token-limit",
        "emoji-over-token-limit-in-batch",
        "too-long",
        "too-long-in-batch",
        "too-many",
        "empty-batch",
        "both",
        "neither",
        "method-only",
        "gold-field",
        "unknown-method",
        "not-a-string",
        "traces-not-bool",
        "not-an-object",
    ],
)
def test_invalid_bodies_are_422_and_never_reach_the_runtime(live, body, expected):
    _, runtime, client = live
    calls = len(runtime.calls)
    response = client.post("/answer", json=body)
    assert response.status_code == 422, response.text
    assert expected in _detail(response)
    assert len(runtime.calls) == calls


@pytest.mark.parametrize("question", ["¿Quién escribió Dune?", "日本の首都は？", "e\u0301t\u00e9 \U0001f600?"])
def test_visible_non_ascii_questions_within_the_limits_are_answered(live, question):
    _, runtime, client = live
    response = client.post("/answer", json={"question": question})
    assert response.status_code == 200, response.text
    assert runtime.calls[-1] == ([question], "d2rag")


def test_malformed_json_is_422(live):
    _, _, client = live
    response = client.post("/answer", content=b'{"question": ', headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert "malformed JSON" in _detail(response)


def test_a_body_that_is_not_utf8_is_422_not_400(live):
    # found by tests/fuzz/test_fuzz_http.py: FastAPI answered 400 "There was an error parsing the body"
    _, _, client = live
    response = client.post("/answer", content=b'{"question": "\x80"}', headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert _detail(response) == "malformed JSON body: not UTF-8 text"


@pytest.mark.parametrize(
    ("content", "content_type"),
    [(b'{"question": "a"}', "text/plain"), (b"", "application/json")],
    ids=["text", "empty"],
)
def test_non_json_or_empty_body_is_422(live, content, content_type):
    _, _, client = live
    response = client.post("/answer", content=content, headers={"content-type": content_type})
    assert response.status_code == 422
    assert "Content-Type: application/json" in _detail(response)


def test_unknown_path_is_404_json(live):
    _, _, client = live
    response = client.get("/nope")
    assert response.status_code == 404
    assert "/nope" in _detail(response)
    wrong_verb = client.get("/answer")
    assert wrong_verb.status_code == 405 and "POST" in _detail(wrong_verb)


# ---------------------------------------------------------------------------------------------------- body size


def test_body_over_limit_with_content_length_is_413(live):
    _, runtime, client = live
    calls = len(runtime.calls)
    body = json.dumps({"question": "x" * 5000}).encode()
    response = client.post("/answer", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert "4096-byte limit" in _detail(response)
    assert response.headers["connection"] == "close"
    assert len(runtime.calls) == calls
    assert client.get("/health").status_code == 200  # a fresh connection serves on


def _chunks(total: int, size: int = 1000) -> Iterator[bytes]:
    data = json.dumps({"question": "y" * (total - 20)}).encode()
    for start in range(0, len(data), size):
        yield data[start : start + size]


def test_chunked_body_over_limit_is_413(live):
    _, runtime, client = live
    calls = len(runtime.calls)
    request = client.build_request(
        "POST", "/answer", content=_chunks(6000), headers={"content-type": "application/json"}
    )
    assert "content-length" not in request.headers and request.headers["transfer-encoding"] == "chunked"
    response = client.send(request)
    assert response.status_code == 413
    assert "exceeds the 4096-byte limit" in _detail(response)
    assert len(runtime.calls) == calls


def test_chunked_body_within_limit_is_answered(live):
    _, _, client = live
    request = client.build_request("POST", "/answer", content=_chunks(90), headers={"content-type": "application/json"})
    assert "content-length" not in request.headers
    response = client.send(request)
    assert response.status_code == 200, response.text
    assert response.json()["answers"][0]["question"] == "y" * 70


def test_endless_chunked_body_is_not_read_to_the_end(live):
    url, _, _ = live
    sent = 0

    def endless() -> Iterator[bytes]:
        nonlocal sent
        for _ in range(2000):  # 128 MB if the server read it all
            sent += 65536
            yield b" " * 65536

    began = time.monotonic()
    with httpx.Client(base_url=url, timeout=5) as client:
        try:
            status = client.post("/answer", content=endless(), headers={"content-type": "application/json"}).status_code
        except httpx.TransportError:
            status = None  # the server closed the connection while we were still writing: also a refusal
    assert status in (413, None)
    assert sent < 2000 * 65536 and time.monotonic() - began < 5
    with httpx.Client(base_url=url, timeout=5) as client:
        assert client.get("/health").status_code == 200


# ---------------------------------------------------------------------------------------------------- runtime errors


def test_runtime_data_error_is_422_with_its_message(live):
    _, _, client = live
    response = client.post("/answer", json={"question": "raise data error"})
    assert response.status_code == 422
    assert _detail(response) == "questions: question 0 cannot be answered by this fake"


def test_runtime_bug_is_500_logged_and_the_server_serves_on(live):
    _, _, client = live
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    log = logging.getLogger("workbench.serve")
    log.addHandler(handler)
    try:
        response = client.post("/answer", json={"question": "raise bug"})
    finally:
        log.removeHandler(handler)
    assert response.status_code == 500
    assert "internal server error" in _detail(response)
    assert "exploded" not in response.text  # the exception's text stays in the log
    assert any(r.exc_info and isinstance(r.exc_info[1], RuntimeError) for r in records)
    assert client.post("/answer", json={"question": "still there?"}).status_code == 200


# ---------------------------------------------------------------------------------------------------- concurrency


def test_health_stays_responsive_while_an_answer_runs(live):
    url, runtime, client = live
    runtime.slow_started.clear()
    result: dict[str, int] = {}

    def slow_request() -> None:
        with httpx.Client(base_url=url, timeout=10) as other:
            result["status"] = other.post("/answer", json={"question": "slow"}).status_code

    # a 3 s answer and a bound of half that: /health must not wait for the model, with room for a loaded machine
    runtime.slow_seconds, before = 3.0, runtime.slow_seconds
    try:
        worker = threading.Thread(target=slow_request)
        worker.start()
        assert runtime.slow_started.wait(5)
        began = time.perf_counter()
        health = client.get("/health")
        elapsed = time.perf_counter() - began
        still_answering = worker.is_alive()
        worker.join(10)
    finally:
        runtime.slow_seconds = before
    assert health.status_code == 200
    assert still_answering, "the slow answer finished before /health was asked: the check proves nothing"
    assert elapsed < 1.5
    assert result == {"status": 200}


def test_run_load_against_the_live_server(live):
    url, _, _ = live
    bodies = [{"question": "load one"}, {"questions": ["load two", "load three"], "method": "dtr"}]
    report = run_load(url, bodies, total=40, concurrency=4, timeout=10)
    assert report["requests"] == 40 and report["concurrency"] == 4
    assert report["errors"] == 0 and report["status_counts"] == {"200": 40}
    assert 0 < report["p50_s"] <= report["p95_s"] <= report["max_s"]
    assert report["seconds"] > 0 and report["throughput_rps"] == pytest.approx(40 / report["seconds"])


def test_run_load_counts_errors_and_checks_its_arguments(live):
    url, _, _ = live
    report = run_load(url, [{"question": ""}], total=3, concurrency=2)
    assert report["errors"] == 3 and report["status_counts"] == {"422": 3} and report["p50_s"] is None
    with pytest.raises(ConfigError, match="concurrency"):
        run_load(url, [{"question": "q"}], concurrency=0)
    with pytest.raises(ConfigError, match="bodies"):
        run_load(url, [])


# ------------------------------------------------------------------------------------------------ run_server, limits


def test_run_server_binds_localhost_by_default_and_prints_its_urls(monkeypatch, capsys):
    assert inspect.signature(run_server).parameters["host"].default == "127.0.0.1"

    async def no_main_loop(self: uvicorn.Server) -> None:  # start, print, shut down at once
        return None

    monkeypatch.setattr(uvicorn.Server, "main_loop", no_main_loop)
    run_server(FakeRuntime(), port=0, log_level="warning")
    # the warm-up thread may log a line of its own (to stdout when a handler is installed): read the server's line
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("workbench serve:")]
    assert len(lines) == 1, lines
    line = lines[0].strip()
    assert line.startswith("workbench serve: fake-bundle 1.2.3 at http://127.0.0.1:")
    port = line.split("http://127.0.0.1:")[1].split(" ")[0]
    url = f"http://127.0.0.1:{port}"
    assert int(port) > 0 and line.endswith(f"(docs: {url}/docs, readiness: {url}/ready)")


def test_serve_limits_defaults_and_validation():
    defaults = ServeLimits()
    assert (defaults.max_batch, defaults.max_body_bytes, defaults.max_question_chars) == (32, 65536, 2000)
    assert (defaults.max_question_tokens, defaults.max_queue, defaults.max_batch_questions) == (256, 128, 8)
    assert defaults.timeout_s == 120.0
    bad_values = (
        {"max_batch": 0},
        {"max_body_bytes": -1},
        {"max_question_chars": 2.5},
        {"max_batch": True},
        {"max_question_tokens": 0},
        {"max_queue": 0},
        {"max_batch_questions": 0},
        {"timeout_s": 0},
        {"timeout_s": float("inf")},
        {"timeout_s": "10"},
    )
    for bad in bad_values:
        with pytest.raises(ConfigError) as info:
            ServeLimits(**bad)
        assert next(iter(bad)) in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=r"max_queue \(8\) must be >= max_batch \(16\)"):
        ServeLimits(max_batch=16, max_queue=8)
    with pytest.raises(AttributeError):
        LIMITS.max_batch = 10  # type: ignore[misc]  # frozen


def test_importing_serve_is_light():
    code = (
        "import sys, workbench.serve; "
        "print(sorted(m for m in ('torch', 'transformers', 'numpy', 'uvicorn', 'httpx') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
