"""``workbench serve-model`` across requests and streamed: concurrent one-prompt requests answered in fewer forward
batches than requests with the answers each would get alone, the token budget of one engine call, and ``stream:
true`` read by the official ``openai`` client — against a live server over a tiny random model."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("torch")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from tests.unit.serve.test_openai_server_limits import NAME, PROMPT, _start  # noqa: E402
from workbench.serve.openai_engine import FINISH  # noqa: E402


@pytest.fixture(scope="module")
def gen(tiny_lm_dir):
    """The tiny random model, loaded once for this module (and the server below)."""
    from workbench.backends.generator import Generator

    return Generator(tiny_lm_dir, max_context=128)


@pytest.fixture(scope="module")
def server(gen):
    """A live request-level ``serve-model`` (``--no-continuous``) over ``gen``, with the limits tests' settings."""
    with _start(gen, continuous=False) as running:  # request level: the held_first_call tests count its calls
        yield running


@pytest.fixture(scope="module")
def client(server):
    """The official ``openai`` client of ``server``."""
    return openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=60)


calls: list[list] = []  # the prompts of each generate call under held_first_call (cleared by it)


@pytest.fixture
def held_first_call(gen, monkeypatch) -> Iterator[tuple[threading.Event, list[int]]]:
    """``gen.generate`` records each call's prompt count (and prompts: ``calls``); its first call waits for the yielded
    event, so the requests sent meanwhile queue up behind it."""
    inner, release, sizes = gen.generate, threading.Event(), []
    calls.clear()

    def generate(prompts, **kwargs):
        sizes.append(len(prompts))
        calls.append(list(prompts))
        if len(sizes) == 1:
            release.wait(10)
        return inner(prompts, **kwargs)

    monkeypatch.setattr(gen, "generate", generate)
    yield release, sizes
    release.set()


def _queued_requests(server) -> int:
    return httpx.get(f"{server.url}/health", timeout=5).json()["queue"]["queued_requests"]


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _concurrently(server, held: tuple[threading.Event, list[int]], asks: list) -> list:
    """Run ``asks`` at once while the first holds the worker; release it once all the others are queued."""
    release, sizes = held
    with ThreadPoolExecutor(len(asks)) as pool:
        first = pool.submit(asks[0])
        _until(lambda: sizes, "the first request never reached the engine")
        rest = [pool.submit(ask) for ask in asks[1:]]
        _until(lambda: _queued_requests(server) == len(asks) - 1, "the requests never queued up")
        release.set()
        return [first.result(30)] + [f.result(30) for f in rest]


# ---------------------------------------------------------------------------------------------------- batching


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "seeded"])
def test_concurrent_one_prompt_requests_share_forwards_and_answer_as_alone(server, gen, held_first_call, temperature):
    sizes = held_first_call[1]
    client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=60)
    prompts = [f"{PROMPT} {i}" for i in range(8)]
    batches = gen.counter.lm_batches

    def ask(prompt: str):
        return lambda: client.completions.create(
            model=NAME, prompt=prompt, max_tokens=4, temperature=temperature, seed=11, logprobs=2
        )

    answers = _concurrently(server, held_first_call, [ask(p) for p in prompts])
    forwards = gen.counter.lm_batches - batches
    assert sizes == [1, 7] and forwards == 2  # 8 requests: the held one, then the other 7 in one forward batch
    for prompt, answer in zip(prompts, answers, strict=True):
        alone = gen.generate([prompt], max_new_tokens=4, temperature=temperature, seed=11, stop=None, top_logprobs=2)
        choice = answer.choices[0]
        assert choice.text == alone[0].text  # the rule: a sample depends on (seed, prompt, index), not its batch
        np.testing.assert_allclose(choice.logprobs.token_logprobs, alone[0].logprobs, atol=1e-4)


def test_the_token_budget_bounds_what_one_engine_call_generates(gen, held_first_call):
    sizes = held_first_call[1]
    with _start(gen, max_batch_tokens=8, continuous=False) as small:  # two requests of 4 tokens per call
        client = openai.OpenAI(base_url=small.base_url, api_key="x", max_retries=0, timeout=60)
        asks = [
            lambda i=i: client.completions.create(model=NAME, prompt=f"{PROMPT} {i}", max_tokens=4, temperature=0)
            for i in range(7)
        ]
        answers = _concurrently(small, held_first_call, asks)
        assert sizes == [1, 2, 2, 2] and all(a.choices[0].text is not None for a in answers)
        # one request over the budget still runs, alone
        big = client.completions.create(model=NAME, prompt=[PROMPT, PROMPT], n=2, max_tokens=4, temperature=0)
        assert len(big.choices) == 4 and sizes[-1] == 2
    from workbench.serve.openai_server import ModelServeLimits

    with pytest.raises(ValueError, match="max_batch_tokens"):
        ModelServeLimits(max_batch_tokens=0)


def test_a_flood_from_one_client_address_does_not_hold_another_back(gen, held_first_call):
    release, _ = held_first_call
    with _start(gen, max_batch_prompts=3, continuous=False) as small:

        def post(prompt: str, address: str):
            def send() -> httpx.Response:
                transport = httpx.HTTPTransport(local_address=address)  # another source address: another client
                with httpx.Client(transport=transport, timeout=30) as http:
                    body = {"model": NAME, "prompt": prompt, "max_tokens": 2, "temperature": 0}
                    return http.post(f"{small.base_url}/completions", json=body)

            return send

        with ThreadPoolExecutor(7) as pool:
            first = pool.submit(post("flood 0", "127.0.0.1"))
            _until(lambda: calls, "the first request never reached the engine")
            flood = []
            for i in range(1, 6):  # queued one after another: their order is known
                flood.append(pool.submit(post(f"flood {i}", "127.0.0.1")))
                _until(lambda i=i: _queued_requests(small) == i, "the flood never queued up")
            other = pool.submit(post("other", "127.0.0.2"))  # last in the queue
            _until(lambda: _queued_requests(small) == 6, "the other client's request never queued")
            release.set()
            answers = [first.result(30), *(f.result(30) for f in flood), other.result(30)]
    assert all(a.status_code == 200 for a in answers)
    # FIFO alone would answer "other" in the third call; taking clients in turn puts it in the first one it fits
    assert calls[1] == ["flood 1", "other", "flood 2"] and calls[2] == ["flood 3", "flood 4", "flood 5"]


def test_continuous_batching_lets_a_request_join_between_steps_and_each_leave_when_done(gen, monkeypatch):
    body = {"model": NAME, "max_tokens": 20, "temperature": 1.0, "seed": 9}
    prompts = [PROMPT, "Hello there"]
    alone = [gen.generate([p], max_new_tokens=20, temperature=1.0, seed=9, stop=None)[0] for p in prompts]
    assert [g.finish_reason for g in alone] == ["length", "length"]  # both decode 20 steps alone
    inner, steps = gen.step, []

    def slow_step(*args, **kwargs):  # 30 ms more per decoding step: the second request arrives mid-decoding
        steps.append(len(args[1]))  # the rows this step advanced
        time.sleep(0.03)
        return inner(*args, **kwargs)

    monkeypatch.setattr(gen, "step", slow_step)
    with _start(gen, continuous=True) as running:
        client = openai.OpenAI(base_url=running.base_url, api_key="x", max_retries=0, timeout=60)
        scheduler, prefills = running.app.state.scheduler, gen.counter.lm_batches

        def ask(prompt: str):
            return lambda: (client.completions.create(prompt=prompt, **body), time.monotonic())

        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(ask(prompts[0]))
            _until(lambda: len(steps) >= 3, "the first request never started decoding")
            second = pool.submit(ask(prompts[1]))
            (a, a_done), (b, b_done) = first.result(30), second.result(30)
        _until(lambda: scheduler.stats()["batches"], "the running batch never ended")  # counted once it returns
        assert scheduler.stats()["batches"] == 1 and gen.counter.lm_batches - prefills == 2  # one batch, 2 prefills
        assert 2 in steps and a_done < b_done  # steps advanced both rows; the first left when its rows ended
        assert len(steps) < 2 * 19  # fewer steps than one request after the other
    assert [a.choices[0].text, b.choices[0].text] == [g.text for g in alone]  # as alone (seeded per row)


def test_continuous_batching_drops_the_rows_of_a_request_whose_client_left(gen, monkeypatch):
    inner, steps = gen.step, []

    def slow_step(*args, **kwargs):
        steps.append(len(args[1]))  # the rows this step advanced
        time.sleep(0.03)
        return inner(*args, **kwargs)

    monkeypatch.setattr(gen, "step", slow_step)
    body = {"model": NAME, "max_tokens": 40, "temperature": 0}
    with _start(gen, continuous=True) as running, ThreadPoolExecutor(2) as pool:
        stays = pool.submit(httpx.post, f"{running.base_url}/completions", json={**body, "prompt": PROMPT}, timeout=30)
        _until(lambda: len(steps) >= 2, "the first request never started decoding")
        with pytest.raises(httpx.TimeoutException):  # joins, then leaves after 0.4 s
            httpx.post(f"{running.base_url}/completions", json={**body, "prompt": "Hello"}, timeout=0.4)
        assert stays.result(30).status_code == 200
    both = [i for i, rows in enumerate(steps) if rows == 2]
    assert both and steps[both[-1] + 1 :] and set(steps[both[-1] + 1 :]) == {1}  # after it left: one row a step
    assert len(both) < 30  # it did not decode to its end


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "seeded"])
def test_continuous_batching_answers_concurrent_requests_as_alone(gen, temperature):
    prompts = [f"{PROMPT} {i}" for i in range(6)]
    stop = gen.generate(prompts[:1], max_new_tokens=8, temperature=temperature, seed=2, stop=None)[0].text[2:4]
    sampling = {"temperature": temperature, "seed": 2, "n": 2}

    def ask(prompt: str):
        return client.completions.create(model=NAME, prompt=prompt, max_tokens=8, stop=stop, logprobs=3, **sampling)

    with _start(gen, continuous=True) as running, ThreadPoolExecutor(6) as pool:
        client = openai.OpenAI(base_url=running.base_url, api_key="x", max_retries=0, timeout=60)
        answers = list(pool.map(ask, prompts))
    for prompt, answer in zip(prompts, answers, strict=True):
        alone = gen.generate([prompt], max_new_tokens=8, stop=[stop], top_logprobs=3, **sampling)
        assert [c.text for c in answer.choices] == [g.text for g in alone]
        assert [c.finish_reason for c in answer.choices] == [FINISH[g.finish_reason] for g in alone]
        listed = answer.choices[1].logprobs.token_logprobs[: len(alone[1].logprobs)]
        np.testing.assert_allclose(listed, alone[1].logprobs, atol=1e-4)


# ---------------------------------------------------------------------------------------------------- streaming


def _events(response: httpx.Response) -> list[dict | str]:
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    out: list[dict | str] = []
    for block in response.text.split("\n\n"):
        if block:
            assert block.startswith("data: ")
            data = block[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_streamed_chat_joins_to_the_whole_answer_with_the_openai_client(client, gen):
    messages = [{"role": "user", "content": "Who wrote Hamlet?"}]
    kwargs = {"model": NAME, "messages": messages, "max_tokens": 8, "temperature": 1.0, "seed": 1, "logprobs": True}
    whole = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks) and len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    body = [c for c in chunks if c.choices]
    text = "".join(c.choices[0].delta.content or "" for c in body)
    assert text == whole.choices[0].message.content and text
    entries = [e for c in body if c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in entries] == [e.token for e in whole.choices[0].logprobs.content]
    assert len([c for c in body if c.choices[0].delta.content]) > 1  # sent in pieces, not in one
    assert [c.choices[0].finish_reason for c in body][-1] == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_streamed_completions_of_several_prompts_and_samples(server, client):
    kwargs = {"model": NAME, "prompt": [PROMPT, "Hello"], "max_tokens": 5, "temperature": 1.0, "seed": 3, "n": 2}
    whole = client.completions.create(**kwargs, logprobs=1)
    chunks = list(client.completions.create(**kwargs, logprobs=1, stream=True))
    for choice in whole.choices:
        mine = [c.choices[0] for c in chunks if c.choices[0].index == choice.index]
        assert "".join(m.text for m in mine) == choice.text and mine[-1].finish_reason == choice.finish_reason
        assert [t for m in mine for t in m.logprobs.tokens] == choice.logprobs.tokens
    # raw events: the OpenAI shape, ending with [DONE]; echo puts the prompt first
    body = {"model": NAME, "prompt": PROMPT, "max_tokens": 3, "temperature": 0, "echo": True, "stream": True}
    events = _events(httpx.post(f"{server.base_url}/completions", json=body, timeout=30))
    assert events[-1] == "[DONE]" and all(e["object"] == "text_completion" for e in events[:-1])
    assert "".join(e["choices"][0]["text"] for e in events[:-1]).startswith(PROMPT)
    assert all("usage" not in e for e in events[:-1])  # no include_usage: no usage field at all


def test_a_refused_streamed_request_is_an_ordinary_json_error(server):
    body = {"model": NAME, "prompt": PROMPT, "max_tokens": 3, "n": 0, "stream": True}
    reply = httpx.post(f"{server.base_url}/completions", json=body, timeout=30)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "n"
    wrong = {"model": NAME, "prompt": PROMPT, "stream": True, "stream_options": {"include_usage": "yes"}}
    assert httpx.post(f"{server.base_url}/completions", json=wrong, timeout=30).status_code == 422


# ---------------------------------------------------------------------------------------------------- bench-served


def test_stream_load_times_first_tokens_and_the_report_states_them(server):
    from workbench.bench.served.report import report_lines
    from workbench.bench.served.streamed import stream_load

    questions = ["Who wrote Hamlet?", "What is the capital of France?"]
    loads = {
        str(c): stream_load(server.base_url, NAME, questions, concurrency=c, requests=4, max_tokens=3) for c in (1, 4)
    }
    for load in loads.values():
        assert load["errors"] == 0 and load["requests"] == 4
        assert 0 < load["ttft_p50_s"] <= load["p50_s"] <= load["p95_s"] and load["tokens_per_s"] > 0
    bad = stream_load(server.base_url, "no-such-model", questions, concurrency=1, requests=2, max_tokens=3)
    assert bad["errors"] == 2 and bad["ttft_p50_s"] is None  # a 404 is counted, never timed
    row = {
        "rates": {"1": {"questions_per_s": 0.4}, "4": {"questions_per_s": 0.6}},
        "vs_in_process": 0.6,
        "vs_own_lowest": 1.5,
        "one_prompt_per_request": {"1": {"questions_per_s": 0.3}, "4": {"questions_per_s": 0.9}},
        "streamed": loads,
        "capabilities": {"n": True},
        "skipped": {},
        "agreement": {"greedy_identical": 1.0},
    }
    bench = {
        "questions": 2,
        "features": [],
        "settings": {"concurrency": [1, 4]},
        "in_process": {"questions_per_s": 1.0, "batch_size": 8},
        "engines": {"serve_model": row},
        "accuracy": 0.5,
    }
    text = "\n".join(report_lines(bench))
    assert "single-prompt requests at concurrency 4: 0.90x the in-process batched rate (goal ≥ 0.8x: **met**)" in text
    first = (
        f"time to first token at concurrency 1 / 4: {loads['1']['ttft_p50_s']:.3f} s / {loads['4']['ttft_p50_s']:.3f} s"
    )
    assert first in text and "## Streaming" in text and "sends each token as it is decoded" in text
    assert "| serve_model | 1 | " in text and "| serve_model | 4 | " in text


def test_bench_served_names_serve_models_batching_either_way():
    from workbench.bench.served.run import serve_model_command

    common = {"top_logprobs": 20, "batch_size": 8, "device": "cpu", "dtype": "float32"}
    request_level = serve_model_command("smollm2", 8000, "bench", **common)
    assert request_level[-1] == "--no-continuous" and "--continuous" not in request_level
    assert serve_model_command("smollm2", 8000, "bench", continuous=True, **common)[-1] == "--continuous"


def test_bench_served_starts_llama_server_with_its_slots_or_says_why_not(tmp_path):
    from types import SimpleNamespace

    from workbench.bench.served.run import _engine_command, llama_server_command
    from workbench.bench.served.settings import BenchServedSection

    command = llama_server_command("/opt/llama-server", 9000, tmp_path / "m.gguf", threads=2, slots=4)
    flags = {flag: command[i + 1] for i, flag in enumerate(command[:-1]) if flag.startswith("--")}
    assert command[0] == "/opt/llama-server" and flags["--parallel"] == "4" and flags["--ctx-size"] == str(4 * 2048)
    assert flags["--port"] == "9000" and flags["--threads"] == flags["--threads-batch"] == "2"

    def ctx(model: str, binary: str):
        section = BenchServedSection(llama_server=binary, llama_server_slots=3)
        return SimpleNamespace(config=SimpleNamespace(bench_served=section, generator=SimpleNamespace(model=model)))

    missing = _engine_command(ctx("smollm2", str(tmp_path / "nowhere")), "llama_server", 9000, 2)
    assert isinstance(missing, str) and "no llama-server binary at" in missing
    assert "has no embedded GGUF file" in _engine_command(ctx(str(tmp_path), "x"), "llama_server", 9000, 2)
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    started, name, ready = _engine_command(ctx("smollm2", str(fake)), "llama_server", 9000, 2)
    assert started[0] == str(fake) and "--parallel" in started and started[started.index("--parallel") + 1] == "3"
    assert name == "gguf" and ready == "http://127.0.0.1:9000/health"  # not /v1/models: it answers while loading


# ---------------------------------------------------------------------------------------------------- token by token


def _stream(url: str, body: dict, on_first=None) -> list[dict | str]:
    """The events of a streamed request read as they arrive; ``on_first()`` runs once the first one is read."""
    out: list[dict | str] = []
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=30) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                data = line[len("data: ") :]
                out.append(data if data == "[DONE]" else json.loads(data))
                if len(out) == 1 and on_first is not None:
                    on_first()
    return out


def _content(events: list[dict | str]) -> list:
    """The events without what differs between two responses (their id and creation time), every number compared to
    float rounding (a batch's shape changes the last bits of a log-probability)."""
    return [
        e if isinstance(e, str) else _rounded({k: v for k, v in e.items() if k not in ("id", "created")})
        for e in events
    ]


def _rounded(value):
    """``value`` with each float wrapped in ``pytest.approx`` (1e-5), dicts and lists walked."""
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return pytest.approx(value, abs=1e-5) if isinstance(value, float) else value


def test_continuous_streaming_sends_the_first_chunk_before_the_last_token_is_decoded(gen, monkeypatch):
    seen, held = threading.Event(), []
    inner = gen.step

    def step(*args, **kwargs):  # the 3rd step waits for the client to have read the first chunk
        held.append(None)
        if len(held) == 3:
            held.append(seen.wait(5))  # whole-then-send: nothing is sent before the end, so this times out
        return inner(*args, **kwargs)

    monkeypatch.setattr(gen, "step", step)
    body = {"model": NAME, "prompt": PROMPT, "max_tokens": 20, "temperature": 1.0, "seed": 9}
    with _start(gen, continuous=True) as running:
        events = _stream(f"{running.base_url}/completions", body, on_first=seen.set)
        whole = httpx.post(f"{running.base_url}/completions", json=body, timeout=30).json()
    assert True in held  # the first chunk reached the client while the 3rd of 20 steps was held
    assert events[-1] == "[DONE]" and len(events) > 3
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == whole["choices"][0]["text"]
    assert events[-2]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(
    ("route", "body"),
    [
        (
            "completions",
            {"prompt": [PROMPT, "Hello"], "n": 2, "temperature": 1.0, "seed": 3, "logprobs": 2, "echo": True},
        ),
        ("completions", {"prompt": PROMPT, "temperature": 0, "n": 2}),
        ("chat/completions", {"messages": [{"role": "user", "content": PROMPT}], "logprobs": True, "top_logprobs": 2}),
    ],
    ids=["completions-logprobs-echo", "completions-greedy-n2", "chat-logprobs"],
)
def test_continuous_streaming_sends_the_same_chunks_as_the_whole_answer(server, gen, route, body):
    body = {"model": NAME, "max_tokens": 12, "seed": 5, "stream_options": {"include_usage": True}, **body}
    first = gen.generate([PROMPT], max_new_tokens=12, temperature=1.0, seed=5, stop=None)[0].text
    body["stop"] = [first[3:5]] if len(first) > 5 else None  # a stop string some answers may meet
    today = _stream(f"{server.base_url}/{route}", body)  # request-level: the whole answer, then its chunks
    with _start(gen, continuous=True) as running:
        live = _stream(f"{running.base_url}/{route}", body)
    # every number to float rounding: a batch's shape changes the last bits of a log-probability
    assert _content(live) == _rounded(_content(today)) and live[-1] == "[DONE]"
    assert live[-2]["usage"]["completion_tokens"] > 0


def test_settled_pieces_never_split_a_character_nor_reach_past_a_possible_stop(gen):
    from workbench.serve.openai_engine import ModelEngine
    from workbench.serve.openai_stream import settled

    assert settled("ab\ufffd", [0, 1, 2], 0) == 2  # the piece with the half-decoded character waits
    assert settled("abcd", [0, 1, 2, 3], 0) == 3  # the last piece waits for the next token
    assert settled("abcd", [0, 1, 2, 3], 2) == 2  # a 3-character stop string could begin at "c"
    engine = ModelEngine(gen)
    ids = engine.tokenizer.encode("é€ ok", add_special_tokens=False)
    texts = [engine._decode(ids[:t], special=False) for t in range(1, len(ids) + 1)]
    assert any(text.endswith("\ufffd") for text in texts)  # the byte-level tokenizer splits these characters
    final = texts[-1]
    for t, text in enumerate(texts, start=1):
        starts = engine._offsets(ids[:t], text, special=False)
        count = settled(text, starts, 0)
        sent = text[: starts[count]] if count < len(starts) else text
        assert "\ufffd" not in sent and final.startswith(sent)


def test_a_live_stream_ends_with_an_error_event_past_its_deadline_and_frees_its_rows_when_the_client_leaves(
    gen, monkeypatch
):
    inner, steps = gen.step, []

    def slow_step(*args, **kwargs):  # 50 ms a step: 40 steps outlast the 1 s deadline
        steps.append(len(args[1]))
        time.sleep(0.05)
        return inner(*args, **kwargs)

    monkeypatch.setattr(gen, "step", slow_step)
    body = {"model": NAME, "prompt": PROMPT, "max_tokens": 40, "temperature": 1.0, "seed": 9}
    with _start(gen, continuous=True, timeout_s=1.0) as running:
        events = _stream(f"{running.base_url}/completions", body)
        assert events[-1] != "[DONE]" and events[-1]["error"]["code"] is None
        assert "deadline" in events[-1]["error"]["message"] and len(events) > 2  # pieces were sent before it
        steps.clear()
        with httpx.stream("POST", f"{running.base_url}/completions", json={**body, "stream": True}) as response:
            next(response.iter_lines())  # the first chunk, then the client leaves
        left = len(steps)
        time.sleep(0.5)
        assert left < 30 and len(steps) <= left + 2  # its rows left the batch within a step or two
