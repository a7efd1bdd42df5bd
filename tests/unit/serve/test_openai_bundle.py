"""``workbench serve`` as an OpenAI-compatible endpoint: ``GET /v1/models`` and ``POST /v1/chat/completions``, called
with the official ``openai`` client against live uvicorn servers on free localhost ports.

Two servers: the model-free FakeRuntime (tests/unit/serve/fake_runtime.py) for the protocol, the refusals and the
load behaviour (queue, deadline, disconnect, batching with ``/answer``), and a real Runtime — the committed fixture
bundle (tests/fixtures/bundles/tiny) on the tiny random models — whose chat answers must equal ``/answer``'s and the
Runtime's own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.unit.serve.fake_runtime import FakeRuntime, serving
from tests.unit.serve.test_serve_load import _wait_queue, blocked_server
from workbench.serve import ServeLimits, create_app

LIMITS = ServeLimits(max_batch=4, max_body_bytes=4096, max_question_chars=100, max_question_tokens=40)
ERROR_KEYS = {"message", "type", "param", "code"}


def _client(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=10)


def _ask(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


def _openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    """The OpenAI error of ``response`` (checked: status, shape, one-line message)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, body
    error = body["error"]
    assert isinstance(error["message"], str) and error["message"] and "\n" not in error["message"]
    assert error["type"] == ("invalid_request_error" if status < 500 else "server_error")
    return error


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[str, FakeRuntime, httpx.Client]]:
    """A live server over the fake runtime (small limits), the runtime, and a raw HTTP client."""
    runtime = FakeRuntime()
    with serving(create_app(runtime, LIMITS)) as url, httpx.Client(base_url=url, timeout=10) as client:
        yield url, runtime, client


# ---------------------------------------------------------------------------------------------------- the protocol


def test_models_are_the_methods(live):
    url, _, http = live
    client = _client(url)
    methods = [m["name"] for m in http.get("/methods").json()["methods"]]
    listed = client.models.list()
    assert [m.id for m in listed.data] == methods == ["dtr", "d2rag"]
    assert all(m.object == "model" and m.owned_by == "fake-bundle" and m.created > 0 for m in listed.data)
    assert client.models.retrieve("dtr").id == "dtr"
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("gpt-4o")
    assert info.value.code == "model_not_found" and info.value.param == "model"


def test_chat_answers_the_last_user_message_as_answer_does(live):
    url, runtime, http = live
    messages = [
        {"role": "system", "content": "You are a pirate."},
        {"role": "user", "content": "an earlier question"},
        {"role": "assistant", "content": "an earlier answer"},
        {"role": "user", "content": [{"type": "text", "text": "Who wrote"}, {"type": "text", "text": "Dune?"}]},
    ]
    resp = _client(url).chat.completions.create(model="dtr", messages=messages)
    question = "Who wrote\nDune?"
    assert runtime.calls[-1] == ([question], "dtr")  # system and earlier messages never reach the method
    assert resp.object == "chat.completion" and resp.id.startswith("chatcmpl-") and resp.created > 0
    assert resp.model == "dtr" and len(resp.choices) == 1
    choice = resp.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert choice.message.content == f"answer to {question}"
    extension = resp.model_extra["workbench"]
    answer = http.post("/answer", json={"question": question, "method": "dtr"}).json()
    record = answer["answers"][0]
    assert extension == {**record, "bundle": {"name": answer["bundle"], "version": answer["version"]}}
    assert extension["retrieved"] is True and extension["passages"] == [{"id": "doc1#0", "title": "Doc one"}]
    assert resp.to_dict()["workbench"] == extension


def test_the_extension_field_carries_d2rags_decision(live):
    url, _, _ = live
    resp = _client(url).chat.completions.create(model="d2rag", messages=_ask("Is it raining?"))
    decision = resp.to_dict()["workbench"]
    assert decision["method"] == "d2rag" and decision["question"] == "Is it raining?"
    assert (decision["p_correct"], decision["tau"], decision["retrieved"]) == (0.75, 0.4, False)
    assert decision["features"] == {"entropy": None, "length": 14.0}  # NaN is not JSON: null
    assert decision["bundle"] == {"name": "fake-bundle", "version": "1.2.3"} and "trace" not in decision
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_a_streamed_chat_sends_the_whole_answer_as_chunks_the_openai_client_reads(live):
    url, runtime, http = live
    whole = _client(url).chat.completions.create(model="d2rag", messages=_ask("Is it raining?"))
    stream = _client(url).chat.completions.create(
        model="d2rag", messages=_ask("Is it raining?"), stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert runtime.calls[-1] == (["Is it raining?"], "d2rag")
    assert all(c.object == "chat.completion.chunk" and c.model == "d2rag" for c in chunks)
    body = [c for c in chunks if c.choices]
    assert body[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in body) == whole.choices[0].message.content
    closing = body[-1]
    assert closing.choices[0].finish_reason == "stop"
    decision = closing.to_dict()["workbench"]
    assert decision["method"] == "d2rag" and decision["bundle"] == {"name": "fake-bundle", "version": "1.2.3"}
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == whole.usage.total_tokens
    raw = http.post("/v1/chat/completions", json={"model": "dtr", "messages": _ask("raw"), "stream": True})
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/event-stream")
    assert raw.text.endswith("data: [DONE]\n\n") and all(
        line.startswith("data: ") for line in raw.text.split("\n\n") if line
    )
    refused = http.post("/v1/chat/completions", json={"model": "nope", "messages": _ask("x"), "stream": True})
    assert _openai_error(refused, 404)["code"] == "model_not_found"  # a refusal is still a JSON error


def test_parameters_a_bundle_ignores_are_accepted(live):
    url, runtime, _ = live
    resp = _client(url).chat.completions.create(
        model="dtr",
        messages=_ask("ignored knobs"),
        temperature=1.7,
        top_p=0.3,
        max_tokens=5,
        max_completion_tokens=5,
        seed=7,
        user="someone",
        stop=["\n"],
        presence_penalty=0.5,
        frequency_penalty=0.5,
        n=1,
        stream=False,
        logprobs=False,
        tool_choice="none",
        response_format={"type": "text"},
    )
    assert resp.choices[0].message.content == "answer to ignored knobs"
    assert runtime.calls[-1] == (["ignored knobs"], "dtr")


TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"n": 2}, "n"),
        ({"tools": [TOOL]}, "tools"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"extra_body": {"logit_bias": {"1": 5}}}, "logit_bias"),
    ],
    ids=["n", "tools", "logprobs", "top_logprobs", "tool_choice", "response_format", "unknown-field"],
)
def test_parameters_a_bundle_cannot_honour_are_400(live, extra, param):
    url, runtime, http = live
    calls = len(runtime.calls)
    with pytest.raises(openai.BadRequestError) as info:
        _client(url).chat.completions.create(model="dtr", messages=_ask("refused"), **extra)
    assert info.value.status_code == 400 and info.value.param == param and info.value.type == "invalid_request_error"
    fields = {k: v for k, v in extra.items() if k != "extra_body"}
    body = {"model": "dtr", "messages": _ask("refused"), **extra.get("extra_body", {}), **fields}
    error = _openai_error(http.post("/v1/chat/completions", json=body), 400)
    assert error["param"] == param and error["code"] is None
    assert len(runtime.calls) == calls


def test_an_unknown_model_is_404_model_not_found(live):
    url, runtime, http = live
    calls = len(runtime.calls)
    with pytest.raises(openai.NotFoundError) as info:
        _client(url).chat.completions.create(model="gpt-4o", messages=_ask("who?"))
    assert info.value.code == "model_not_found" and "dtr, d2rag" in info.value.message
    error = _openai_error(http.post("/v1/chat/completions", json={"model": "bm25", "messages": _ask("who?")}), 404)
    assert (error["code"], error["param"]) == ("model_not_found", "model")
    assert len(runtime.calls) == calls


@pytest.mark.parametrize(
    ("messages", "param", "expected"),
    [
        (_ask("   "), "messages[0].content", "blank"),
        (_ask("\u200b\u200c\u2060"), "messages[0].content", "blank"),
        ([{"role": "user", "content": "fine"}, {"role": "user", "content": ""}], "messages[1].content", "blank"),
        (_ask("x" * 101), "messages[0].content", "over the 100-character limit"),
        (_ask("\U0001f600" * 20), "messages[0].content", "80 tokens, over the 40-token limit"),
        ([{"role": "system", "content": "only a system message"}], "messages", "no user message"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            "messages[0].content[0]",
            "got type 'image_url'",
        ),
        ([{"role": "user", "content": 5}], "messages[0].content", "a string or a list of text parts"),
        ([{"content": "no role"}], "messages[0].role", "Field required"),
        ([], "messages", "at least 1"),
    ],
    ids=[
        "blank",
        "zero-width",
        "blank-last",
        "too-long",
        "too-many-tokens",
        "no-user",
        "image",
        "not-text",
        "no-role",
        "no-messages",
    ],
)
def test_invalid_questions_are_400_and_never_reach_the_runtime(live, messages, param, expected):
    url, runtime, http = live
    calls = len(runtime.calls)
    error = _openai_error(http.post("/v1/chat/completions", json={"model": "d2rag", "messages": messages}), 400)
    assert error["param"] == param and expected in error["message"]
    with pytest.raises(openai.BadRequestError):
        _client(url).chat.completions.create(model="d2rag", messages=messages)
    assert len(runtime.calls) == calls


def test_request_errors_on_v1_paths_are_openai_shaped_and_the_old_routes_keep_theirs(live):
    _, _, http = live
    json_type = {"content-type": "application/json"}
    missing = _openai_error(http.post("/v1/chat/completions", json={"messages": _ask("q")}), 400)
    assert missing["param"] == "model"
    malformed = _openai_error(http.post("/v1/chat/completions", content=b'{"model": ', headers=json_type), 400)
    assert "malformed JSON" in malformed["message"] and malformed["param"] is None
    not_utf8 = http.post("/v1/chat/completions", content=b'{"model": "\x80"}', headers=json_type)
    assert _openai_error(not_utf8, 400)["message"] == "malformed JSON body: not UTF-8 text"
    too_big = http.post("/v1/chat/completions", content=b"x" * 5000, headers=json_type)
    assert "4096-byte limit" in _openai_error(too_big, 413)["message"]
    assert "/v1/completions" in _openai_error(http.post("/v1/completions", json={}), 404)["message"]
    assert "allowed: POST" in _openai_error(http.get("/v1/chat/completions"), 405)["message"]
    # the existing routes keep {"detail": ...}
    assert set(http.post("/answer", content=b"x" * 5000, headers=json_type).json()) == {"detail"}
    assert set(http.get("/nope").json()) == {"detail"}
    assert http.post("/answer", json={"question": " "}).status_code == 422


def test_runtime_refusals_and_bugs(live):
    url, _, http = live
    client = _client(url)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="d2rag", messages=_ask("raise data error"))
    assert "cannot be answered" in refused.value.message and refused.value.param == "messages[0].content"
    with pytest.raises(openai.InternalServerError) as bug:
        client.chat.completions.create(model="d2rag", messages=_ask("raise bug"))
    assert bug.value.status_code == 500 and "exploded" not in bug.value.message
    assert http.post("/v1/chat/completions", json={"model": "d2rag", "messages": _ask("still up?")}).status_code == 200


def test_openapi_describes_the_v1_routes(live):
    _, _, http = live
    spec = http.get("/openapi.json").json()
    assert {"/v1/models", "/v1/chat/completions"} <= set(spec["paths"])
    responses = spec["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert {"200", "400", "404", "413", "500", "503", "504"} <= set(responses)
    assert {"application/json", "text/event-stream"} <= set(responses["200"]["content"])  # whole or streamed


# ---------------------------------------------------------------------------------------------------- under load


def _chat_post(url: str, question: str, model: str = "d2rag", timeout: float = 10.0) -> httpx.Response | Exception:
    try:
        with httpx.Client(base_url=url, timeout=timeout) as client:
            return client.post("/v1/chat/completions", json={"model": model, "messages": _ask(question)})
    except httpx.HTTPError as exc:
        return exc


def test_chat_requests_are_batched_with_answer_requests_of_the_same_method():
    with blocked_server(ServeLimits(max_batch_questions=8)) as (url, runtime, post), ThreadPoolExecutor(4) as pool:
        first = post({"question": "a1", "method": "dtr"})
        _wait_queue(url, lambda q: q["queued"] == 1, "the /answer request queued")
        chat = pool.submit(_chat_post, url, "c1", "dtr")
        _wait_queue(url, lambda q: q["queued"] == 2, "the chat request queued")
        other = pool.submit(_chat_post, url, "c2", "d2rag")
        _wait_queue(url, lambda q: q["queued"] == 3, "the d2rag chat queued")
        second = post({"question": "a2", "method": "dtr"})
        _wait_queue(url, lambda q: q["queued"] == 4, "the second /answer queued")
        runtime.release.set()
        assert first.result(10).status_code == second.result(10).status_code == 200
        assert chat.result(10).json()["choices"][0]["message"]["content"] == "answer to c1"
        assert other.result(10).json()["workbench"]["method"] == "d2rag"
    assert runtime.calls[1:] == [(["a1", "c1", "a2"], "dtr"), (["c2"], "d2rag")]


def test_a_full_queue_is_503_with_retry_after():
    with blocked_server(ServeLimits(max_batch=1, max_queue=1)) as (url, runtime, post):
        post({"question": "q1"})
        _wait_queue(url, lambda q: q["queued"] == 1, "queue full")
        refused = _chat_post(url, "no room")
        error = _openai_error(refused, 503)
        assert "limit 1" in error["message"] and int(refused.headers["retry-after"]) >= 1
        with pytest.raises(openai.InternalServerError):
            _client(url).chat.completions.create(model="d2rag", messages=_ask("no room either"))
        runtime.release.set()
    assert "no room" not in runtime.questions_seen()


def test_a_chat_past_its_deadline_is_504_and_never_computed():
    with blocked_server(ServeLimits(timeout_s=0.5)) as (url, runtime, _):
        began = time.monotonic()
        late = _chat_post(url, "late")
        assert 0.4 < time.monotonic() - began < 2.0
        assert "0.5 s deadline" in _openai_error(late, 504)["message"]
        runtime.release.set()
    assert "late" not in runtime.questions_seen()


def test_a_chat_whose_client_left_is_dropped_unanswered():
    with blocked_server(ServeLimits()) as (url, runtime, _):
        gone = _chat_post(url, "abandoned chat", timeout=0.2)
        assert isinstance(gone, httpx.TimeoutException)
        _wait_queue(url, lambda q: q["dropped"] == 1 and q["queued"] == 0, "the disconnect noticed")
        runtime.release.set()
        assert _chat_post(url, "next").status_code == 200
    assert "abandoned chat" not in runtime.questions_seen()


# ---------------------------------------------------------------------------------------------------- a real bundle


@pytest.fixture(scope="module")
def real(tmp_path_factory, tiny_lm_long_dir, tiny_encoder_dir) -> Iterator[tuple[str, Any, httpx.Client]]:
    """The committed fixture bundle loaded on the tiny models (the ones it was exported with: same weights) and a
    small corpus, served live; yields its URL, the Runtime and a raw HTTP client."""
    from tests.bundle_run import load_fixture_on_tiny_models

    work = tmp_path_factory.mktemp("openai-bundle")
    runtime = load_fixture_on_tiny_models(work, tiny_lm_long_dir, tiny_encoder_dir).warm()
    with serving(create_app(runtime, ServeLimits())) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield url, runtime, client


def _same_answer(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in ("latency_s", "trace")}  # wall time differs per call


def test_a_real_bundle_answers_chat_as_answer_and_the_runtime_do(real):
    url, runtime, http = real
    client = _client(url)
    assert [m.id for m in client.models.list().data] == [m["name"] for m in http.get("/methods").json()["methods"]]
    assert list(runtime.methods) == ["d2rag", "no_rag", "standard_rag"]
    question = "Who wrote Hamlet?"
    for method in runtime.methods:
        resp = client.chat.completions.create(
            model=method, messages=[{"role": "system", "content": "Answer briefly."}, *_ask(question)]
        )
        direct = runtime.answer(question, method).to_dict()
        served = http.post("/answer", json={"question": question, "method": method}).json()["answers"][0]
        extension = resp.to_dict()["workbench"]
        assert _same_answer(served) == _same_answer(direct)
        assert _same_answer({k: v for k, v in extension.items() if k != "bundle"}) == _same_answer(direct)
        assert extension["bundle"] == {"name": runtime.name, "version": runtime.version}
        assert resp.model == method and resp.choices[0].finish_reason == "stop"
        assert resp.choices[0].message.content == direct["text"]
        assert resp.usage.prompt_tokens == round(direct["prompt_tokens"]) > 0
        assert resp.usage.completion_tokens == round(direct["generated_tokens"])
        assert extension["lm_calls"] == direct["lm_calls"] >= 1
        if method == "d2rag":  # the decision: a calibrated probability against τ, and how it decoded
            assert 0.0 <= extension["p_correct"] <= 1.0 and extension["tau"] is not None
            assert not extension["retrieved"] or extension["p_correct"] < extension["tau"]  # retrieve iff P < τ
            assert extension["utility_class"] in (None, "closed", "relevant", "neutral", "noisy")
        if method == "standard_rag":
            assert extension["retrieved"] and len(extension["passages"]) == 2
            assert all(set(p) == {"id", "title"} for p in extension["passages"])


def test_a_real_bundle_answer_whose_client_left_is_interrupted_between_decoding_steps(real, monkeypatch):
    """The runtime generates on the scheduler's worker thread, and no method swallows the interruption: a client that
    leaves stops the model at its next decoding step (each slowed to 100 ms here), and the next caller is answered."""
    url, runtime, http = real
    generator = runtime.tools().generator
    inner, steps = generator.step, []

    def slow_step(*args: Any, **kwargs: Any) -> Any:
        steps.append(time.monotonic())
        time.sleep(0.1)
        return inner(*args, **kwargs)

    monkeypatch.setattr(generator, "step", slow_step)
    before = http.get("/health").json()["queue"]["interrupted"]
    questions = [f"Who wrote book number {i}?" for i in range(8)]
    with pytest.raises(httpx.TimeoutException):  # D²-RAG: greedy answers, samples, then decoding: seconds of steps
        httpx.post(f"{url}/answer", json={"questions": questions, "method": "d2rag"}, timeout=0.4)
    deadline = time.monotonic() + 10
    while http.get("/health").json()["queue"]["interrupted"] == before:
        assert time.monotonic() < deadline, "the abandoned batch was never interrupted"
        time.sleep(0.02)
    stopped = len(steps)
    monkeypatch.undo()
    assert http.post("/answer", json={"question": "Who wrote Hamlet?", "method": "no_rag"}).status_code == 200
    assert len(steps) == stopped  # the abandoned answers never stepped again
