"""The served backend against a live `serve-model` on the tiny Llama: same answers, log-probs, samples and scores as
in-process; the probe; the top-k approximation; and one-line errors for every fault a server can have."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import threading
import time

import numpy as np
import pytest

from workbench.backends.factory import build_served_generator
from workbench.backends.prompts import ANSWER_SYSTEM
from workbench.backends.served import ServedGenerator, sample_seed, topk_entropy
from workbench.backends.served_client import ServedModelError, ServedSettings

QUESTIONS = ["Who wrote Hamlet?", "Which river flows through Paris?", "What is the capital of France?"]


@pytest.fixture(scope="module")
def served(server, tiny_lm_dir):
    generator = build_served_generator(
        base_url=server.base_url, model="tiny", tokenizer=str(tiny_lm_dir), top_logprobs=1000, cache=False
    )
    yield generator
    generator.close()


def _prompts(generator):
    return [generator.build_prompt(q, None, max_new_tokens=8, system=ANSWER_SYSTEM).text for q in QUESTIONS]


def test_the_probe_finds_everything_serve_model_gives(served, local):
    caps = served.capabilities
    assert caps.logprobs and caps.echo and caps.token_prompts and caps.token_ids and caps.n and caps.seed
    assert caps.prompt_lists
    assert caps.top_logprobs >= len(local.tokenizer)  # ids as keys: no two tokens collapse into one entry
    assert not caps.hidden_states and not caps.step_logits and caps.chat_template == "local"
    assert served.probe_record.texts == [g.text for g in local.generate(
        ["The capital of France is", "Question: who wrote Hamlet?\nAnswer:", "1, 2, 3, 4,"],
        max_new_tokens=6, stop=(),
    )]  # fmt: skip


def test_prompts_render_exactly_as_in_process(served, local):
    assert _prompts(served) == _prompts(local)
    assert served.render_chat("hi", system="sys") == local.render_chat("hi", system="sys")


def test_greedy_answers_log_probs_and_entropies_equal_in_process(served, local):
    prompts = _prompts(local)
    want = local.generate(prompts, max_new_tokens=8, stop=("\n",))
    got = served.generate(prompts, max_new_tokens=8, stop=("\n",))
    for a, b in zip(want, got, strict=True):
        assert b.text == a.text and b.finish_reason == a.finish_reason
        assert b.token_ids.tolist() == a.token_ids.tolist()
        np.testing.assert_allclose(b.logprobs, a.logprobs, atol=1e-4)
        np.testing.assert_allclose(b.entropies, a.entropies, atol=1e-3)  # the top k cover the whole vocabulary
        assert (a.eos_logprob is None) == (b.eos_logprob is None)
    assert served.counter.lm_calls >= len(prompts) and served.counter.decoded_tokens > 0


def test_seeded_samples_equal_in_process(served, local):
    prompts = _prompts(local)[:2]
    want = local.generate(prompts, max_new_tokens=6, temperature=0.9, n=3, seed=11, stop=())
    got = served.generate(prompts, max_new_tokens=6, temperature=0.9, n=3, seed=11, stop=())
    assert [g.text for g in got] == [g.text for g in want]
    for a, b in zip(want, got, strict=True):
        np.testing.assert_allclose(b.logprobs, a.logprobs, atol=1e-4)
    assert [g.sample_index for g in got] == [0, 1, 2, 0, 1, 2]


def test_every_sending_path_gives_the_samples_its_seed_rule_states(served, local, tiny_lm_dir):
    """Besides n with prompt lists (as probed: the test above), n one prompt per request gives in-process sample j
    of the seed too; without n (one choice per sample, as prompt lists), sample j is the first sample of
    ``sample_seed(seed, j)``."""
    prompts = _prompts(local)[:2]
    kwargs = {"max_new_tokens": 6, "temperature": 0.9, "stop": ()}
    want = [g.text for g in local.generate(prompts, n=3, seed=11, **kwargs)]
    alone = [local.generate([p], n=1, seed=sample_seed(11, j), **kwargs)[0].text for p in prompts for j in range(3)]
    for change, expected in (({"prompt_lists": False}, want), ({"n": False}, alone)):
        generator = ServedGenerator(
            served.settings,
            tokenizer=str(tiny_lm_dir),
            capabilities=dataclasses.replace(served.capabilities, **change),
            probe_record=served.probe_record,
            top_logprobs=served.top_logprobs,
        )
        try:
            assert [g.text for g in generator.generate(prompts, n=3, seed=11, **kwargs)] == expected, change
        finally:
            generator.close()


def test_scores_and_next_token_reads_equal_in_process(served, local):
    prompts = _prompts(local)
    conts = ["William Shakespeare", "the Seine", ""]
    for a, b in zip(local.score(prompts, conts, add_eos=True), served.score(prompts, conts, add_eos=True), strict=True):
        assert b.token_ids.tolist() == a.token_ids.tolist()
        np.testing.assert_allclose(b.logprobs, a.logprobs, atol=1e-4)
        np.testing.assert_allclose(b.entropies, a.entropies, atol=1e-3)
    options = ["yes", "no", "maybe"]
    np.testing.assert_allclose(
        served.next_token_logprobs(prompts, options), local.next_token_logprobs(prompts, options), atol=1e-4
    )
    assert served.option_reads["top_k"] == 9 and not served.absent_reads  # the top k cover the vocabulary


def test_a_narrow_top_k_gives_lower_bound_entropies_and_teacher_forced_reads(server, tiny_lm_dir, local):
    narrow = build_served_generator(
        base_url=server.base_url, model="tiny", tokenizer=str(tiny_lm_dir), top_logprobs=3, cache=False
    )
    try:
        prompts = _prompts(local)
        exact = local.generate(prompts, max_new_tokens=6, stop=())
        approx = narrow.generate(prompts, max_new_tokens=6, stop=())
        for a, b in zip(exact, approx, strict=True):
            np.testing.assert_allclose(b.logprobs, a.logprobs, atol=1e-4)  # chosen tokens stay exact
            assert np.all(b.entropies <= a.entropies + 1e-4)
        options = [f" {w}" for w in ("the", "Paris", "river", "of", "a", "in")]
        tok = local.tokenizer  # and each prompt's greedy first token, in the top 3 (read there)
        firsts = {tok.decode(g.token_ids[:1]): int(g.token_ids[0]) for g in exact if len(g.token_ids)}
        options += [t for t, i in firsts.items() if t and tok(t, add_special_tokens=False)["input_ids"][:1] == [i]]
        assert len(options) > 6
        reads = narrow.next_token_logprobs(prompts, options)
        # options outside the top 3 are teacher-forced with echo: exact, never the k-th log-prob
        np.testing.assert_allclose(reads, local.next_token_logprobs(prompts, options), atol=1e-4)
        assert narrow.option_reads["teacher_forced"] > 0 and narrow.option_reads["top_k"] > 0
        assert not narrow.absent_reads
    finally:
        narrow.close()


def test_topk_entropy_is_exact_on_a_full_distribution_and_a_lower_bound_otherwise():
    p = np.array([0.5, 0.25, 0.125, 0.125])
    exact = float(-(p * np.log(p)).sum())
    assert topk_entropy(dict(zip("abcd", np.log(p), strict=True))) == pytest.approx(exact)
    assert topk_entropy(list(np.log(p[:2]))) < exact
    assert np.isnan(topk_entropy(None))


def test_what_no_server_gives_is_refused_in_one_line(served):
    with pytest.raises(ServedModelError, match="hidden states need the in-process backend"):
        served.generate(["x"], max_new_tokens=2, return_hidden_layer=1)


# ---------------------------------------------------------------------- faults


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def faulty_server(mode: str):
    """A real HTTP server that lists model 'tiny' and answers completions with one kind of fault."""
    import uvicorn
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, PlainTextResponse

    app = FastAPI()

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": "tiny", "object": "model", "max_model_len": 256}]}

    @app.post("/v1/completions")
    def completions():
        if mode == "500":
            return JSONResponse({"error": {"message": "engine crashed"}}, status_code=500)
        if mode == "truncated":
            return PlainTextResponse('{"choices": [{"text": "Par', media_type="application/json")
        if mode == "slow":
            time.sleep(3)
        choice = {"index": 0, "text": "Paris", "finish_reason": "stop", "logprobs": None}
        return {"id": "x", "object": "text_completion", "created": 0, "model": "tiny", "choices": [choice]}

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _one_line(exc: BaseException, *needles: str) -> None:
    text = str(exc)
    assert "\n" not in text
    for needle in needles:
        assert needle in text, text


def test_an_unreachable_server_is_one_line_naming_the_url():
    url = f"http://127.0.0.1:{_free_port()}/v1"
    with pytest.raises(ServedModelError) as err:
        build_served_generator(base_url=url, model="tiny", retries=0, timeout_s=2, cache=False)
    _one_line(err.value, url, "unreachable")


def test_an_unknown_model_and_an_unset_key_are_one_line(server):
    with pytest.raises(ServedModelError) as err:
        build_served_generator(base_url=server.base_url, model="nope", cache=False)
    _one_line(err.value, "does not serve model 'nope'", "tiny")
    with pytest.raises(ServedModelError) as err:
        ServedSettings(server.base_url, "tiny", api_key_env="WORKBENCH_TEST_UNSET_KEY").validate()
    _one_line(err.value, "WORKBENCH_TEST_UNSET_KEY is not set")


@pytest.mark.parametrize("mode", ["500", "truncated", "slow"])
def test_a_failing_server_is_retried_then_one_line(mode):
    with faulty_server(mode) as url, pytest.raises(ServedModelError) as err:
        build_served_generator(base_url=url, model="tiny", retries=1, timeout_s=1, cache=False)
    expected = {"500": "HTTP 500", "truncated": "malformed", "slow": "timed out"}[mode]
    _one_line(err.value, url, expected)


def test_a_server_that_ignores_logprobs_serves_text_and_refuses_what_needs_them():
    with faulty_server("no-logprobs") as url:
        generator = ServedGenerator(ServedSettings(url, "tiny", retries=0))
        try:
            assert not generator.capabilities.logprobs and generator.capabilities.top_logprobs == 0
            assert generator.generate(["Q?"], max_new_tokens=4)[0].text == "Paris"
            with pytest.raises(ServedModelError, match="needs token_prompts"):
                generator.next_token_logprobs(["Q?"], ["yes"])
        finally:
            generator.close()


def test_without_a_tokenizer_the_servers_chat_template_renders_the_prompts(server, local):
    chat_only = build_served_generator(base_url=server.base_url, model="tiny", top_logprobs=1000, cache=False)
    try:
        assert chat_only.capabilities.chat_template == "server" and chat_only.tokenizer is None
        built = chat_only.build_prompt(QUESTIONS[0], "Hamlet is a play.", max_new_tokens=8, system=ANSWER_SYSTEM)
        got = chat_only.generate([built.text], max_new_tokens=8, stop=("\n",))[0]
        want = local.generate(_prompts(local)[:1], max_new_tokens=8, stop=("\n",))[0]
        closed = chat_only.generate(
            [chat_only.build_prompt(QUESTIONS[0], None, max_new_tokens=8, system=ANSWER_SYSTEM).text],
            max_new_tokens=8,
            stop=("\n",),
        )[0]
        assert closed.text == want.text  # the server's template is the model's own: the same prompt
        np.testing.assert_allclose(closed.logprobs, want.logprobs, atol=1e-4)
        assert isinstance(got.text, str)
    finally:
        chat_only.close()


def test_a_pair_of_reads_takes_one_echoed_request_and_equals_two_reads(server, tiny_lm_dir, local):
    """read_next_pair: the reads after each head and after head + tail from one echoed request per batch (one
    prefill of head + tail on the server), equal to two read_next calls and to in-process, options outside the top k
    teacher-forced."""
    narrow = build_served_generator(
        base_url=server.base_url, model="tiny", tokenizer=str(tiny_lm_dir), top_logprobs=3, cache=False
    )
    try:
        tok = local.tokenizer
        heads = [narrow.encode_prompt(p, 100) for p in _prompts(local)]
        tail = list(tok(" Answer:", add_special_tokens=False)["input_ids"])
        first_ids = [int(tok(w, add_special_tokens=False)["input_ids"][0]) for w in (" yes", " no", " the")]
        second_ids = [int(tok(w, add_special_tokens=False)["input_ids"][0]) for w in (" 1", " 2", " Paris", " a")]
        # each position's greedy token too: in the top 3, read there
        first_ids += [int(g.token_ids[0]) for g in local.generate(heads, max_new_tokens=1, stop=None)]
        second_ids += [int(g.token_ids[0]) for g in local.generate([h + tail for h in heads], max_new_tokens=1)]
        calls = narrow.counter.lm_calls
        first, second = narrow.read_next_pair(heads, tail, first_ids, second_ids)
        forced = narrow.option_reads["teacher_forced"]
        assert narrow.counter.lm_calls - calls == len(heads) + forced  # one echoed read per head (two reads: 2)
        np.testing.assert_allclose(first, narrow.read_next(heads, first_ids), atol=1e-4)
        np.testing.assert_allclose(second, narrow.read_next([h + tail for h in heads], second_ids), atol=1e-4)
        for r, head in enumerate(heads):  # in-process, teacher-forced one option at a time
            own = local.prompt_logprobs([[*head, o] for o in first_ids] + [[*head, *tail, o] for o in second_ids])
            np.testing.assert_allclose(first[r], [o.logprobs[-1] for o in own[: len(first_ids)]], atol=1e-4)
            np.testing.assert_allclose(second[r], [o.logprobs[-1] for o in own[len(first_ids) :]], atol=1e-4)
        assert 0 < forced < first.size + second.size and not narrow.absent_reads
    finally:
        narrow.close()
