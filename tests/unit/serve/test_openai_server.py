"""``workbench serve-model`` (workbench.serve.openai_server) against a live uvicorn server on a free localhost port,
called with the official ``openai`` client; its answers are compared with the in-process generator it serves."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("torch")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from workbench.backends.prompts import encode  # noqa: E402

PROMPTS = ["The capital of France", "Question: who wrote Hamlet? Answer: William"]
NAME = "tiny"


@pytest.fixture(scope="module")
def gen(tiny_lm_dir):
    from workbench.backends.generator import Generator

    return Generator(tiny_lm_dir, max_context=128)


@pytest.fixture(scope="module")
def server(gen):
    from workbench.serve.openai_server import start_in_thread

    running = start_in_thread(gen, served_name=NAME, max_logprobs=1000)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=60)


def _ids(tokens: list[str]) -> list[int]:
    assert all(t.startswith("token_id:") for t in tokens)
    return [int(t[len("token_id:") :]) for t in tokens]


def _lp(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def test_models_and_health(server, client, gen):
    (card,) = client.models.list().data
    assert card.id == NAME and card.owned_by == "workbench"
    raw = httpx.get(f"{server.base_url}/models").json()["data"][0]
    assert raw["max_model_len"] == gen.max_context == 128 and raw["max_logprobs"] == 1000
    health = httpx.get(f"{server.url}/health").json()
    assert health["status"] == "ok" and health["model"] == NAME and "queue" in health
    assert gen.cache is None  # the reference server computes every answer


def test_greedy_text_tokens_logprobs_and_offsets_equal_in_process(client, gen):
    ref = gen.generate(PROMPTS, max_new_tokens=6, temperature=0, stop=None, top_logprobs=5)
    answer = client.completions.create(
        model=NAME,
        prompt=PROMPTS,
        max_tokens=6,
        temperature=0,
        logprobs=5,
        extra_body={"return_tokens_as_token_ids": True},
    )
    assert [c.index for c in answer.choices] == [0, 1]
    for choice, g in zip(answer.choices, ref, strict=True):
        assert choice.text == g.text and choice.finish_reason == "length"
        lp = choice.logprobs
        assert _ids(lp.tokens) == g.token_ids.tolist()
        np.testing.assert_array_equal(_lp(lp.token_logprobs), g.logprobs)
        for t, top in enumerate(lp.top_logprobs):
            assert _ids(list(top)) == g.top_ids[t].tolist()
            np.testing.assert_array_equal(_lp(list(top.values())), g.top_logprobs[t])
        ids = g.token_ids.tolist()
        assert lp.text_offset == [len(gen.tokenizer.decode(ids[:t], skip_special_tokens=True)) for t in range(len(ids))]
    assert answer.usage.prompt_tokens == sum(len(encode(gen.tokenizer, p)) for p in PROMPTS)
    assert answer.usage.completion_tokens == 12
    # token texts by default: each token's own decoding
    plain = client.completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=3, temperature=0, logprobs=1)
    assert plain.choices[0].logprobs.tokens == [gen.tokenizer.decode([i]) for i in ref[0].token_ids[:3]]


def test_seeded_samples_equal_in_process_samples_for_text_and_token_prompts(client, gen):
    ref = gen.generate(PROMPTS[:1], max_new_tokens=6, temperature=1.0, top_p=0.95, n=3, seed=11, stop=None)
    assert len({g.text for g in ref}) > 1  # really different samples
    kwargs = {"max_tokens": 6, "temperature": 1.0, "top_p": 0.95, "n": 3, "seed": 11, "logprobs": 0}
    by_text = client.completions.create(model=NAME, prompt=PROMPTS[0], **kwargs)
    by_ids = client.completions.create(model=NAME, prompt=encode(gen.tokenizer, PROMPTS[0]), **kwargs)
    for answer in (by_text, by_ids):
        assert [c.text for c in answer.choices] == [g.text for g in ref]
        for choice, g in zip(answer.choices, ref, strict=True):
            np.testing.assert_array_equal(_lp(choice.logprobs.token_logprobs), g.logprobs)  # raw, not processed
            # logprobs=0: the chosen token's entry alone (OpenAI always lists the chosen token)
            assert [len(top) for top in choice.logprobs.top_logprobs] == [1] * len(g.token_ids)
    # a request without a seed samples afresh: test_openai_server_limits.py


def test_full_vocabulary_top_logprobs_give_the_exact_entropy(client, gen):
    vocab = gen.vocab_size
    ref = gen.generate(PROMPTS[1:], max_new_tokens=4, temperature=0, stop=None)[0]
    answer = client.completions.create(
        model=NAME,
        prompt=PROMPTS[1],
        max_tokens=4,
        temperature=0,
        logprobs=vocab,
        extra_body={"return_tokens_as_token_ids": True},
    )
    tops = answer.choices[0].logprobs.top_logprobs
    assert [len(top) for top in tops] == [vocab] * 4
    values = np.asarray([list(top.values()) for top in tops], dtype=np.float64)
    np.testing.assert_allclose(-(np.exp(values) * values).sum(1), ref.entropies, atol=1e-4)


def test_an_echo_continuing_an_earlier_request_s_echo_reuses_its_kv_with_the_same_values(server, client, gen):
    """An option read teacher-forced after its prompt's echo (the prompt + one token, a later request) is continued
    from the kept KV cache of the earlier echo (backends.echo_cache): only the new tokens are encoded, the values
    are a whole forward's."""
    cache = server.app.state.engine.echo_cache
    assert cache is not None and cache.max_tokens == 8192  # on by default
    ids = encode(gen.tokenizer, PROMPTS[1] + " Shakespeare, the playwright from Stratford, in the year")
    first = client.completions.create(model=NAME, prompt=ids, max_tokens=1, echo=True, logprobs=2, temperature=0)
    hits = cache.hits
    option = int(ids[3])  # any token
    forced = client.completions.create(
        model=NAME, prompt=[*ids, option], max_tokens=1, echo=True, logprobs=2, temperature=0
    )
    assert cache.hits == hits + 1
    want = gen.prompt_logprobs([[*ids, option]], top_logprobs=2)[0]
    np.testing.assert_allclose(
        _lp(forced.choices[0].logprobs.token_logprobs[1 : len(ids) + 1]), want.logprobs, atol=1e-4
    )
    earlier = _lp(first.choices[0].logprobs.token_logprobs[1 : len(ids)])
    np.testing.assert_allclose(_lp(forced.choices[0].logprobs.token_logprobs[1 : len(ids)]), earlier, atol=1e-5)


def test_echo_logprobs_equal_score_on_the_same_ids(client, gen):
    prompt, cont = PROMPTS[1], " Shakespeare wrote Hamlet."
    p_ids = encode(gen.tokenizer, prompt)
    c_ids = list(gen.tokenizer(cont, add_special_tokens=False)["input_ids"])
    scored = gen.score([prompt], [cont])[0]
    answer = client.completions.create(model=NAME, prompt=p_ids + c_ids, max_tokens=0, echo=True, logprobs=2)
    choice = answer.choices[0]
    assert choice.text == gen.tokenizer.decode(p_ids + c_ids) and choice.finish_reason == "length"
    lp = choice.logprobs
    assert len(lp.tokens) == len(p_ids) + len(c_ids)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(len(top) in (2, 3) for top in lp.top_logprobs[1:])  # the top 2, and the echoed token when outside
    np.testing.assert_allclose(_lp(lp.token_logprobs[len(p_ids) :]), scored.logprobs, atol=1e-5)
    assert answer.usage.prompt_tokens == len(p_ids) + len(c_ids) and answer.usage.completion_tokens == 0
    # echo with generation: the prompt's tokens first, then the greedy answer's; offsets into prompt + text
    ref = gen.generate([prompt], max_new_tokens=3, temperature=0, stop=None)[0]
    both = client.completions.create(model=NAME, prompt=prompt, max_tokens=3, echo=True, logprobs=1, temperature=0)
    lp = both.choices[0].logprobs
    assert both.choices[0].text == prompt + ref.text
    assert len(lp.tokens) == len(p_ids) + 3 and lp.text_offset[len(p_ids)] == len(prompt)
    assert lp.text_offset[: len(p_ids)] == [len(gen.tokenizer.decode(p_ids[:t])) for t in range(len(p_ids))]
    np.testing.assert_array_equal(_lp(lp.token_logprobs[len(p_ids) :]), ref.logprobs)


def test_a_one_token_echo_read_is_answered_by_one_forward(client, gen, monkeypatch):
    """echo + max_tokens 1 at temperature 0 (lm-eval's log-likelihood request, the served backend's teacher-forced
    read): the generated token comes from the echo pass itself — ``generate`` is not called — and equals generate's."""
    ref = gen.generate(PROMPTS, max_new_tokens=1, temperature=0, stop=None, top_logprobs=3)
    calls = []
    monkeypatch.setattr(gen, "generate", lambda *a, **k: calls.append(a) or pytest.fail("generate was called"))
    answer = client.completions.create(model=NAME, prompt=PROMPTS, max_tokens=1, echo=True, logprobs=3, temperature=0)
    assert not calls and len(answer.choices) == 2
    for choice, r, prompt in zip(sorted(answer.choices, key=lambda c: c.index), ref, PROMPTS, strict=True):
        n = len(encode(gen.tokenizer, prompt))
        assert choice.text == prompt + r.text and len(choice.logprobs.tokens) == n + 1
        assert choice.logprobs.token_logprobs[n] == pytest.approx(float(r.logprobs[0]), abs=1e-5)
        top = choice.logprobs.top_logprobs[n]
        assert len(top) >= 3 and max(top.values()) == pytest.approx(float(r.top_logprobs[0, 0]), abs=1e-5)
    assert answer.usage.completion_tokens == 2


def test_eos_is_the_last_logprobs_entry(server, client, gen):
    ref = gen.generate(PROMPTS[:1], max_new_tokens=6, temperature=0, stop=None)[0]
    eos = int(ref.token_ids[2])
    saved = gen.eos_ids
    gen.eos_ids = saved | {eos}
    try:
        expected = gen.generate(PROMPTS[:1], max_new_tokens=6, temperature=0, stop=None, top_logprobs=3)[0]
        answer = client.completions.create(
            model=NAME,
            prompt=PROMPTS[0],
            max_tokens=6,
            temperature=0,
            logprobs=3,
            extra_body={"return_tokens_as_token_ids": True},
        )
        chat = client.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0, logprobs=True
        )
    finally:
        gen.eos_ids = saved
    assert expected.finish_reason == "eos"
    choice = answer.choices[0]
    assert choice.finish_reason == "stop" and choice.text == expected.text
    lp = choice.logprobs
    assert _ids(lp.tokens) == [*expected.token_ids.tolist(), eos]
    assert lp.token_logprobs[-1] == pytest.approx(expected.eos_logprob, abs=1e-6)
    assert _ids(list(lp.top_logprobs[-1])) == expected.eos_top_ids.tolist()
    assert lp.text_offset[-1] == len(choice.text)
    assert answer.usage.completion_tokens == len(expected.token_ids) + 1
    if chat.choices[0].finish_reason == "stop":  # the chat answer may not meet that token within 8
        assert chat.choices[0].logprobs.content[-1].token == gen.tokenizer.decode([eos])


def test_stop_strings_cut_the_text_and_list_the_covering_tokens(client, gen):
    full = gen.generate(PROMPTS[:1], max_new_tokens=8, temperature=0, stop=None)[0].text
    stop = full[3:5]
    ref = gen.generate(PROMPTS[:1], max_new_tokens=8, temperature=0, stop=[stop])[0]
    assert ref.finish_reason == "stop"
    answer = client.completions.create(
        model=NAME,
        prompt=PROMPTS[0],
        max_tokens=8,
        temperature=0,
        stop=stop,
        logprobs=1,
        extra_body={"return_tokens_as_token_ids": True},
    )
    choice = answer.choices[0]
    assert choice.text == ref.text == full[: full.find(stop)] and choice.finish_reason == "stop"
    assert _ids(choice.logprobs.tokens) == ref.token_ids.tolist()


def test_chat_route_applies_the_chat_template(client, gen):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who wrote Hamlet?"}]
    rendered = gen.render_chat(messages)
    ref = gen.generate([rendered], max_new_tokens=5, temperature=0, stop=None, top_logprobs=2)[0]
    answer = client.chat.completions.create(
        model=NAME, messages=messages, max_tokens=5, temperature=0, logprobs=True, top_logprobs=2
    )
    choice = answer.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == ref.text
    assert choice.finish_reason == "length" and answer.object == "chat.completion"
    content = choice.logprobs.content
    np.testing.assert_array_equal(_lp([c.logprob for c in content]), ref.logprobs)
    assert [c.token for c in content] == [gen.tokenizer.decode([i]) for i in ref.token_ids]
    assert all(len(c.top_logprobs) == 2 and c.bytes == list(c.token.encode()) for c in content)
    assert answer.usage.prompt_tokens == len(encode(gen.tokenizer, rendered))
    parts = [{"role": "user", "content": [{"type": "text", "text": "Who wrote Hamlet?"}]}]
    again = client.chat.completions.create(
        model=NAME, messages=parts, max_tokens=5, temperature=0, max_completion_tokens=5
    )
    alone = gen.generate([gen.render_chat(parts[0]["content"][0]["text"])], max_new_tokens=5, temperature=0, stop=None)
    assert again.choices[0].message.content == alone[0].text and again.choices[0].logprobs is None


def test_concurrent_requests_share_generate_calls(gen, monkeypatch):
    """Request-level batching (``--no-continuous``): the requests queued while an engine call runs share the next
    ``generate`` call, one per sampling."""
    from workbench.serve.openai_server import ModelServeLimits, start_in_thread

    calls: list[tuple[float, int]] = []
    inner = gen.generate
    started = threading.Event()

    def counted(prompts, **kwargs):
        calls.append((kwargs["temperature"], len(prompts)))
        started.set()
        time.sleep(0.3)  # the first call holds the worker: the other requests queue up behind it
        return inner(prompts, **kwargs)

    monkeypatch.setattr(gen, "generate", counted)
    prompts = [f"{PROMPTS[0]} {i}" for i in range(6)]
    with start_in_thread(gen, served_name=NAME, limits=ModelServeLimits(continuous=False)) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=60)

        def ask(i: int):
            sampled = i % 2 == 1
            return client.completions.create(
                model=NAME, prompt=prompts[i], max_tokens=3, temperature=1.0 if sampled else 0.0, seed=5
            )

        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(ask, range(6)))
    assert 2 <= len(calls) < 6  # batched, and greedy never shares a call with sampled
    assert sum(n for _, n in calls) == 6
    monkeypatch.undo()
    for i, answer in enumerate(answers):
        temperature = 1.0 if i % 2 else 0.0
        alone = gen.generate([prompts[i]], max_new_tokens=3, temperature=temperature, seed=5, stop=None)[0]
        assert answer.choices[0].text == alone.text


def test_errors_are_one_line_openai_bodies(server, client, gen):
    def refused(kind, **kwargs):
        with pytest.raises(kind) as info:
            client.completions.create(model=kwargs.pop("model", NAME), prompt=kwargs.pop("prompt", "Hi"), **kwargs)
        body = info.value.body
        assert set(body) == {"message", "type", "param", "code"} and "\n" not in body["message"]
        return info.value

    assert refused(openai.NotFoundError, model="gpt-4").body["code"] == "model_not_found"
    assert refused(openai.BadRequestError, logprobs=1001).body["param"] == "logprobs"
    assert refused(openai.BadRequestError, max_tokens=0).body["param"] == "max_tokens"
    assert refused(openai.BadRequestError, max_tokens=2, n=0).body["param"] == "n"
    assert refused(openai.BadRequestError, max_tokens=2, top_p=0).body["param"] == "top_p"
    assert "context length" in refused(openai.BadRequestError, prompt="x " * 200, max_tokens=4).body["message"]
    assert "vocabulary" in refused(openai.BadRequestError, prompt=[gen.vocab_size + 5], max_tokens=2).body["message"]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hi"}], top_logprobs=3)
    # unknown fields are ignored
    ok = client.completions.create(model=NAME, prompt="Hi", max_tokens=1, extra_body={"ignore_eos": True, "foo": 1})
    assert len(ok.choices) == 1
    # raw HTTP: malformed JSON and wrong types are 422, unknown routes 404, a huge body 413, all OpenAI-shaped
    for path, body, status in (
        ("/completions", "{bad json", 422),
        ("/completions", json.dumps({"model": NAME, "prompt": "Hi", "max_tokens": "3"}), 422),
        ("/completions", json.dumps({"model": NAME, "prompt": "Hi", "n": "2", "stream": True}), 422),
        ("/nope", "{}", 404),
    ):
        reply = httpx.post(f"{server.base_url}{path}", content=body, headers={"content-type": "application/json"})
        assert reply.status_code == status, reply.text
        error = reply.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and "\n" not in error["message"]
    big = httpx.post(
        f"{server.base_url}/completions", content=b"x" * (9 << 20), headers={"content-type": "application/json"}
    )
    assert big.status_code == 413 and "error" in big.json()


def test_cli_serve_model_builds_a_cacheless_generator(tiny_lm_dir, tiny_encoder_dir, monkeypatch):
    from typer.testing import CliRunner

    from workbench import cli
    from workbench.serve import openai_server

    seen = {}
    monkeypatch.setattr(openai_server, "run_model_server", lambda generator, **kw: seen.update(gen=generator, **kw))
    limits = ["--max-sequences", "12", "--max-request-tokens", "900", "--max-echo-tokens", "300"]
    limits += ["--max-batch-tokens", "4000", "--no-continuous", "--echo-cache-tokens", "100"]
    result = CliRunner().invoke(
        cli.app,
        [
            "serve-model",
            "--model",
            str(tiny_lm_dir),
            "--max-logprobs",
            "7",
            "--port",
            "0",
            "--batch-size",
            "3",
            "--embedder",
            str(tiny_encoder_dir),
            "--embedder-name",
            "enc",
            *limits,
        ],
    )
    assert result.exit_code == 0, result.output
    assert seen["gen"].cache is None and seen["gen"].batch_size == 3
    assert seen["served_name"] == str(tiny_lm_dir) and seen["limits"].max_logprobs == 7 and seen["port"] == 0
    chosen = seen["limits"]
    assert (chosen.max_sequences, chosen.max_request_tokens, chosen.max_echo_tokens) == (12, 900, 300)
    assert chosen.max_batch_tokens == 4000 and chosen.continuous is False and chosen.echo_cache_tokens == 100
    assert seen["embedder_name"] == "enc" and seen["embedder"].dim == 32 and seen["embedder"]._cache is None
    seen.clear()
    default = CliRunner().invoke(cli.app, ["serve-model", "--model", str(tiny_lm_dir), "--embedder", "none"])
    assert default.exit_code == 0, default.output
    assert seen["limits"].continuous is True and seen["embedder"] is None  # continuous batching unless told not to
    same = CliRunner().invoke(cli.app, ["serve-model", "--model", "x", "--embedder", "x"])
    assert "both named 'x'" in str(same.exception)
    refused = CliRunner().invoke(cli.app, ["serve-model", "--model", str(tiny_lm_dir), "--max-request-tokens", "0"])
    assert "max_request_tokens must be an integer >= 1" in str(refused.exception)  # a WorkbenchError: exit 2
