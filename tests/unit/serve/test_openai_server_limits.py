"""``workbench serve-model`` under attack and load: fresh seeds, top log-probs with the chosen token, the work one
request may ask, work stopped for a client that left or a deadline that passed, and bodies that are not strict JSON,
not Unicode text or carry numbers of thousands of digits — each against a live server (uvicorn on a free localhost
port) over a tiny random model."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("torch")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from workbench.backends.prompts import encode  # noqa: E402

NAME = "tiny"
PROMPT = "The capital of France"


@pytest.fixture(scope="module")
def gen(tiny_lm_dir):
    from workbench.backends.generator import Generator

    return Generator(tiny_lm_dir, max_context=128)


def _start(gen, **limits):
    from workbench.serve.openai_server import ModelServeLimits, start_in_thread

    return start_in_thread(gen, served_name=NAME, limits=replace(ModelServeLimits(max_logprobs=50), **limits))


@pytest.fixture(scope="module")
def server(gen):
    running = _start(gen)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=60)


def _ids(tokens) -> list[int]:
    return [int(t[len("token_id:") :]) for t in tokens]


def _queue(server) -> dict[str, int]:
    return httpx.get(f"{server.url}/health", timeout=5).json()["queue"]


def _post(server, path: str, body: str | bytes) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}{path}", content=body, headers={"content-type": "application/json"}, timeout=30
    )


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and "\n" not in error["message"]
    assert len(error["message"]) <= 500 and not re.search(r"\d{19}", error["message"])  # no huge number echoed
    return error


# ---------------------------------------------------------------------------------------------------- seeds


def test_requests_without_a_seed_sample_afresh_and_seeded_ones_repeat(client, gen):
    kwargs = {"model": NAME, "prompt": PROMPT, "max_tokens": 8, "temperature": 1.0, "n": 2}
    first, second = (client.completions.create(**kwargs) for _ in range(2))
    assert [c.text for c in first.choices] != [c.text for c in second.choices]
    # the same prompt twice in one request: its two works never share a seed either
    twice = client.completions.create(model=NAME, prompt=[PROMPT, PROMPT], max_tokens=8, temperature=1.0)
    assert twice.choices[0].text != twice.choices[1].text
    # a seed makes a request reproducible, and equal to the in-process samples for that seed
    seeded = [client.completions.create(**kwargs, seed=7) for _ in range(2)]
    expected = [g.text for g in gen.generate([PROMPT], max_new_tokens=8, temperature=1.0, n=2, seed=7, stop=None)]
    assert [c.text for c in seeded[0].choices] == [c.text for c in seeded[1].choices] == expected


# ---------------------------------------------------------------------------------------------------- log-probs


def test_top_logprobs_add_the_chosen_token_when_it_is_not_among_the_top_k(client, gen):
    sampled = {"max_tokens": 8, "temperature": 1.0, "n": 4, "seed": 3}
    ref = gen.generate([PROMPT], max_new_tokens=8, temperature=1.0, n=4, seed=3, stop=None, top_logprobs=1)
    answer = client.completions.create(
        model=NAME, prompt=PROMPT, logprobs=1, extra_body={"return_tokens_as_token_ids": True}, **sampled
    )
    outside = 0
    for choice, g in zip(answer.choices, ref, strict=True):
        for t, top in enumerate(choice.logprobs.top_logprobs):
            chosen, best = int(g.token_ids[t]), int(g.top_ids[t][0])
            expected = {f"token_id:{best}": float(g.top_logprobs[t][0]), f"token_id:{chosen}": float(g.logprobs[t])}
            assert top.keys() == expected.keys()
            np.testing.assert_allclose(list(top.values()), list(expected.values()), atol=1e-6)
            outside += chosen != best
    assert outside > 0  # the sampled tokens were not all the most likely: k + 1 entries were written
    # logprobs=0: the chosen token alone, as OpenAI writes it
    zero = client.completions.create(model=NAME, prompt=PROMPT, logprobs=0, **{**sampled, "n": 1})
    assert all(len(top) == 1 for top in zero.choices[0].logprobs.top_logprobs)
    assert [next(iter(top.values())) for top in zero.choices[0].logprobs.top_logprobs] == pytest.approx(
        zero.choices[0].logprobs.token_logprobs
    )


def test_echoed_prompt_positions_list_the_prompt_token_and_chat_keeps_k(client, gen):
    ids = encode(gen.tokenizer, "Question: who wrote Hamlet? Answer: William Shakespeare")
    own = gen.prompt_logprobs([ids], top_logprobs=1)[0]
    answer = client.completions.create(
        model=NAME, prompt=ids, max_tokens=0, echo=True, logprobs=1, extra_body={"return_tokens_as_token_ids": True}
    )
    tops = answer.choices[0].logprobs.top_logprobs
    assert tops[0] is None
    for t in range(1, len(ids)):
        want = {f"token_id:{int(own.top_ids[t - 1][0])}", f"token_id:{ids[t]}"}
        assert set(tops[t]) == want
    assert any(len(top) == 2 for top in tops[1:])  # a prompt token outside the top 1
    chat = client.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=6, temperature=1.0, seed=3,
        logprobs=True, top_logprobs=1,
    )  # fmt: skip
    assert all(len(item.top_logprobs) == 1 for item in chat.choices[0].logprobs.content)


# ---------------------------------------------------------------------------------------------------- work limits


def test_the_work_of_one_request_is_bounded_as_a_whole(server, client):
    batches = _queue(server)["batches"]

    def refused(**kwargs):
        route = client.chat.completions if "messages" in kwargs else client.completions
        with pytest.raises(openai.BadRequestError) as info:
            route.create(model=NAME, **kwargs)
        return info.value.body

    too_many = refused(prompt=[f"{PROMPT} {i}" for i in range(5)], n=60, max_tokens=1)
    assert too_many["param"] == "n" and "300 sequences" in too_many["message"] and "256" in too_many["message"]
    too_long = refused(prompt=PROMPT, n=4, max_tokens=8000)
    assert too_long["param"] == "max_tokens" and "16384" in too_long["message"]
    chat = refused(messages=[{"role": "user", "content": "hi"}], n=64, max_tokens=300)
    assert chat["param"] == "max_tokens" and "19200 tokens" in chat["message"]
    assert _queue(server)["batches"] == batches  # refused before the queue: nothing generated


def test_echoed_prompt_tokens_are_bounded_per_request(gen):
    with _start(gen, max_echo_tokens=40) as small:
        client = openai.OpenAI(base_url=small.base_url, api_key="x", max_retries=0, timeout=60)
        prompts = [list(range(10, 30)), list(range(30, 50)), list(range(50, 70))]  # 60 tokens with echo
        calls = gen.counter.lm_calls
        with pytest.raises(openai.BadRequestError) as info:
            client.completions.create(model=NAME, prompt=prompts, max_tokens=0, echo=True, logprobs=1)
        assert info.value.body["param"] == "echo" and "60 prompt tokens" in info.value.body["message"]
        assert gen.counter.lm_calls == calls  # refused before any model call
        within = client.completions.create(model=NAME, prompt=prompts[:2], max_tokens=0, echo=True, logprobs=1)
        assert [len(c.logprobs.tokens) for c in within.choices] == [20, 20]
        plain = client.completions.create(model=NAME, prompt=prompts, max_tokens=1, echo=True)  # no log-probs listed
        assert len(plain.choices) == 3


@pytest.fixture
def slow_steps(gen, monkeypatch) -> Iterator[list[float]]:
    """Every decoding step of ``gen`` takes 50 ms longer; yields the times the steps began."""
    inner, began = gen.step, []

    def step(*args, **kwargs):
        began.append(time.monotonic())
        time.sleep(0.05)
        return inner(*args, **kwargs)

    monkeypatch.setattr(gen, "step", step)
    yield began


def _wait_interrupted(server, before: int) -> None:
    deadline = time.monotonic() + 5
    while _queue(server)["interrupted"] == before:
        assert time.monotonic() < deadline, "the abandoned batch was never interrupted"
        time.sleep(0.02)


def test_a_client_that_leaves_stops_its_generation_between_decoding_steps(server, slow_steps):
    before = _queue(server)["interrupted"]
    body = {"model": NAME, "prompt": PROMPT, "max_tokens": 100, "temperature": 0.0}  # 100 steps: 5 s
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{server.base_url}/completions", json=body, timeout=0.5)
    _wait_interrupted(server, before)
    stopped = len(slow_steps)
    assert stopped < 40  # about 0.5 s of steps, not the 100 the request asked for
    began = time.monotonic()
    answer = httpx.post(f"{server.base_url}/completions", json={**body, "max_tokens": 2}, timeout=10)
    assert answer.status_code == 200 and time.monotonic() - began < 2.0  # the next caller is not held
    assert len(slow_steps) == stopped + 1  # the abandoned request never stepped again


def test_a_request_past_its_deadline_is_504_and_its_generation_interrupted(gen, slow_steps):
    with _start(gen, timeout_s=0.5) as short:
        began = time.monotonic()
        late = httpx.post(
            f"{short.base_url}/completions", json={"model": NAME, "prompt": PROMPT, "max_tokens": 100}, timeout=10
        )
        assert _error(late, 504) and time.monotonic() - began < 2.0
        _wait_interrupted(short, 0)
        assert len(slow_steps) < 40


# ---------------------------------------------------------------------------------------------------- bad bodies


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/completions", '{"model": "tiny", "prompt": "hi \\ud800", "max_tokens": 2}', "prompt"),
        ("/completions", '{"model": "tiny", "prompt": ["ok", "\\udc00"], "max_tokens": 2}', "prompt"),
        ("/completions", '{"model": "tiny", "prompt": "hi", "max_tokens": 2, "stop": ["\\ud83d"]}', "stop"),
        ("/chat/completions", '{"model": "tiny", "messages": [{"role": "user", "content": "\\ud800"}]}', "messages"),
    ],
    ids=["prompt", "prompt-list", "stop", "chat"],
)
def test_a_lone_surrogate_is_400_naming_the_field(server, path, body, param):
    error = _error(_post(server, path, body), 400)
    assert error["param"] == param and "surrogate" in error["message"]


@pytest.mark.parametrize(
    ("field", "param"),
    [("seed", "seed"), ("n", "n"), ("max_tokens", "max_tokens"), ("top_k", "top_k"), ("logprobs", "logprobs")],
)
def test_a_number_past_its_fields_range_is_400_naming_the_field(server, field, param):
    huge = int("9" * 30)  # within the strict parser's 40 digits, past every field's range
    body = {"model": NAME, "prompt": "hi", "max_tokens": 2, "temperature": 1.0, field: huge}
    assert _error(_post(server, "/completions", json.dumps(body)), 400)["param"] == param
    ids = _error(_post(server, "/completions", json.dumps({"model": NAME, "prompt": [huge]})), 400)
    assert ids["param"] == "prompt"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"model": "tiny", "prompt": "hi", "max_tokens": 2, "max_tokens": 3}', "duplicate key 'max_tokens'"),
        ('{"model": "tiny", "prompt": "hi", "temperature": NaN}', "NaN"),
        ("[" * 5000 + "]" * 5000, "nested deeper than 64"),
        ('{"model": "tiny", "prompt": "hi", "user": ' + "9" * 5000 + "}", "an integer of more than 40 digits"),
        (b'{"model": "tiny", "prompt": "\x80"}', "not UTF-8"),
    ],
    ids=["duplicate-key", "nan", "deep", "5000-digits", "not-utf8"],
)
def test_a_body_that_is_not_strict_json_is_422(server, body, expected):
    error = _error(_post(server, "/completions", body), 422)
    assert error["message"].startswith("malformed JSON body:") and expected in error["message"]


def test_a_body_over_the_limit_is_413_for_a_client_that_sends_it_whole(server):
    """urllib (like curl and requests) sends the whole body before it reads: closing on the unread rest made its
    system reset the connection, and the client never saw the 413."""
    body = json.dumps({"model": NAME, "prompt": "x" * (9 << 20)}).encode()
    request = urllib.request.Request(f"{server.base_url}/completions", data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=30)
    assert info.value.code == 413 and "error" in json.loads(info.value.read())
