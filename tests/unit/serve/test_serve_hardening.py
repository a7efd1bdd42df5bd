"""``workbench serve`` against the attack findings of issue 41 and its work limits, on a live server (uvicorn on a free
localhost port) over the model-free FakeRuntime: bodies that are not strict JSON or not Unicode text, a 9 MB body
sent whole, a running batch stopped for a client that left or a deadline that passed, requests for more work than
the deadline allows, and the out-of-distribution flags counted in ``/health``."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import httpx
import pytest

from tests.unit.serve.fake_runtime import STEPS, FakeRuntime, serving
from workbench.serve import ServeLimits, create_app


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[str, FakeRuntime, httpx.Client]]:
    runtime = FakeRuntime()
    with serving(create_app(runtime, ServeLimits())) as url, httpx.Client(base_url=url, timeout=10) as client:
        yield url, runtime, client


def _detail(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and len(detail) <= 500 and "9999999999" not in detail
    return detail


def _post(client: httpx.Client, path: str, body: str) -> httpx.Response:
    return client.post(path, content=body, headers={"content-type": "application/json"})


def _health(url: str) -> dict:
    return httpx.get(f"{url}/health", timeout=5).json()


# ---------------------------------------------------------------------------------------------------- bodies


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"question": "Who wrote Dune?", "question": "Who wrote Emma?"}', "duplicate key 'question'"),
        ('{"questions": ["a"], "traces": false, "traces": true}', "duplicate key 'traces'"),
        ('{"question": "a", "traces": NaN}', "NaN"),
        ('{"questions": ' + "[" * 3000 + "]" * 3000 + "}", "nested deeper than 64"),
        ('{"question": "a", "id": ' + "9" * 5000 + "}", "an integer of more than 40 digits"),
    ],
    ids=["duplicate-question", "duplicate-traces", "nan", "deep", "5000-digit-id"],
)
def test_a_body_that_is_not_strict_json_is_422_and_never_answered(live, body, expected):
    _, runtime, client = live
    calls = len(runtime.calls)
    detail = _detail(_post(client, "/answer", body), 422)
    assert detail.startswith("malformed JSON body:") and expected in detail
    assert len(runtime.calls) == calls


def test_a_duplicate_key_on_the_openai_route_is_400(live):
    _, _, client = live
    body = '{"model": "dtr", "messages": [{"role": "user", "content": "a"}], "model": "d2rag"}'
    response = _post(client, "/v1/chat/completions", body)
    assert response.status_code == 400 and "duplicate key 'model'" in response.json()["error"]["message"]


def test_a_huge_integer_field_is_refused_without_quoting_it(live):
    _, _, client = live
    body = '{"question": "a", "id": ' + "9" * 40 + "}"  # parses (the strict parser takes 40 digits): an unknown field
    assert "unknown field 'id'" in _detail(_post(client, "/answer", body), 422)


def test_a_lone_surrogate_is_refused_naming_the_question(live):
    _, runtime, client = live
    calls = len(runtime.calls)
    single = _post(client, "/answer", '{"question": "Who wrote \\ud800?"}')
    assert "question: Input should be a valid string, unable to parse raw data as a unicode string" in _detail(
        single, 422
    )
    batch = _post(client, "/answer", '{"questions": ["fine", "\\udfff"]}')
    assert "questions[1]: Input should be a valid string" in _detail(batch, 422)
    chat_body = '{"model": "dtr", "messages": [{"role": "user", "content": "\\ud83d"}]}'
    chat = _post(client, "/v1/chat/completions", chat_body)
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "messages[0].content"
    assert len(runtime.calls) == calls


def test_a_9_mb_body_sent_whole_gets_413_not_a_reset_connection(live):
    """urllib (like curl and requests) sends the whole body before it reads the answer: a server that closes with the
    body unread makes the client's system reset the connection, and the 413 was never seen."""
    url, runtime, client = live
    calls = len(runtime.calls)
    request = urllib.request.Request(f"{url}/answer", data=json.dumps({"question": "x" * (9 << 20)}).encode())
    request.add_header("Content-Type", "application/json")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=30)
    assert info.value.code == 413 and "65536-byte limit" in json.loads(info.value.read())["detail"]
    assert len(runtime.calls) == calls
    assert client.get("/health").status_code == 200


# ---------------------------------------------------------------------------------------------------- work


def _wait_interrupted(url: str, before: int) -> None:
    deadline = time.monotonic() + 5
    while _health(url)["queue"]["interrupted"] == before:
        assert time.monotonic() < deadline, "the abandoned batch was never interrupted"
        time.sleep(0.02)


def test_a_running_batch_whose_client_left_is_interrupted_and_the_next_caller_not_held(live):
    url, runtime, _ = live
    before, steps = _health(url)["queue"]["interrupted"], runtime.steps_done
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{url}/answer", json={"question": "steps"}, timeout=0.5)  # 200 steps of 20 ms: 4 s
    _wait_interrupted(url, before)
    stopped = runtime.steps_done
    assert stopped - steps < STEPS // 2
    began = time.monotonic()
    assert httpx.post(f"{url}/answer", json={"question": "next caller"}, timeout=10).status_code == 200
    assert time.monotonic() - began < 1.0
    assert runtime.steps_done == stopped  # the abandoned question never stepped again


def test_a_running_batch_past_its_deadline_is_504_and_interrupted():
    runtime = FakeRuntime()
    with serving(create_app(runtime, ServeLimits(timeout_s=0.5))) as url:
        began = time.monotonic()
        late = httpx.post(f"{url}/answer", json={"question": "steps"}, timeout=10)
        assert "0.5 s deadline" in _detail(late, 504) and time.monotonic() - began < 2.0
        _wait_interrupted(url, 0)
        assert runtime.steps_done < STEPS // 2


def test_more_questions_than_the_deadline_allows_at_the_fastest_measured_rate_are_422():
    runtime = FakeRuntime(slow_seconds=0.3)  # each "slow" question takes 0.3 s
    with serving(create_app(runtime, ServeLimits(timeout_s=2.0))) as url, httpx.Client(base_url=url) as client:

        def ask(questions: list[str], method: str = "dtr") -> httpx.Response:
            return client.post("/answer", json={"questions": questions, "method": method}, timeout=10)

        assert ask(["slow"]).status_code == 200  # nothing measured yet: tried (a first batch is not measured)
        assert ask(["slow"]).status_code == 200
        calls = len(runtime.calls)
        detail = _detail(ask(["slow"] * 8), 422)  # 8 x 0.3 s > 2 s
        assert "8 questions for dtr need at least 2 s" in detail and "over the 2 s deadline" in detail
        fits = int(re.search(r"send at most (\d+) per request", detail).group(1))
        assert 1 <= fits <= 6
        assert len(runtime.calls) == calls  # refused before the queue
        assert ask(["slow"] * 2).status_code == 200
        # another method has its own rate (none measured yet: tried), and a single question is always tried
        assert ask(["slow"] * 3, method="d2rag").status_code == 200
        assert ask(["slow"]).status_code == 200


# ---------------------------------------------------------------------------------------------------- OOD flags


def test_health_counts_the_answers_flagged_out_of_distribution():
    runtime = FakeRuntime()
    with serving(create_app(runtime, ServeLimits())) as url, httpx.Client(base_url=url, timeout=10) as client:
        assert _health(url)["ood"] == {"checked": 0, "flagged": 0, "reported": 0, "retrieved": 0, "refused": 0}
        answers = client.post("/answer", json={"questions": ["ood: a riddle", "Who wrote Dune?", "ood: a poem"]})
        assert [a["ood"]["flag"] for a in answers.json()["answers"]] == [True, False, True]
        chat = {"model": "dtr", "messages": [{"role": "user", "content": "ood"}]}
        assert client.post("/v1/chat/completions", json=chat).status_code == 200
        assert _health(url)["ood"] == {"checked": 4, "flagged": 3, "reported": 3, "retrieved": 0, "refused": 0}
