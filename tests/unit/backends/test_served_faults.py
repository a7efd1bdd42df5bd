"""The served client against a peer that misbehaves on purpose: a real HTTP server (``http.server``, a thread per
request) that speaks just enough of the OpenAI protocol and breaks it one way per mode — ``logprobs: null``, NaN or
positive log-probs, a short list, a shortened answer, too few choices, another model's answer, an answer dribbled a
byte at a time, a huge answer. Every fault is retried, then fails in one line naming it; none becomes a number.
Also: what the probe reads from the peer's model card (context window, EOS ids), the context window's one-line
refusals, and the seeds of samples asked one at a time."""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from workbench.backends.capabilities import Capabilities
from workbench.backends.served import ServedGenerator, sample_seed
from workbench.backends.served_client import ServedClient, ServedModelError, ServedSettings
from workbench.backends.served_probe import ProbeRecord, probe

VALID_CHOICE = {
    "text": "Paris",
    "finish_reason": "length",
    "logprobs": {
        "tokens": ["Par", "is"],
        "token_logprobs": [-0.5, -0.25],
        "top_logprobs": [{"Par": -0.5, "x": -1.5}, {"is": -0.25, "y": -2.0}],
        "text_offset": [0, 3],
    },
}


def _prompt_count(prompt: Any) -> int:
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        return len(prompt)
    return 1


def _break(answer: dict[str, Any], mode: str) -> dict[str, Any]:
    """``answer`` with the fault ``mode`` put into it."""
    block = answer["choices"][0]["logprobs"]
    if mode == "logprobs-null":
        answer["choices"][0]["logprobs"] = None
    elif mode == "nan":
        block["token_logprobs"][1] = float("nan")
    elif mode == "positive":
        block["token_logprobs"][0] = 5.0
    elif mode == "short-list":
        block["token_logprobs"] = block["token_logprobs"][:1]
    elif mode == "shortened":  # every list cut alike: the tokens no longer make up the text
        for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
            block[key] = block[key][:1]
    elif mode == "choices":
        answer["choices"] = answer["choices"][:-1]
    elif mode == "model":
        answer["model"] = "another-model"
    elif mode == "huge":
        answer["padding"] = "x" * (6 << 20)
    return answer


class FaultPeer:
    """The misbehaving server (see the module docstring): answers ``GET /v1/models`` with one model ``tiny`` (and
    ``card``'s extra fields), and completions / chat completions validly, except the first ``bad`` answers, which
    carry the fault ``mode``. ``choice`` replaces the completion choice it answers with. Records every request body;
    the chat route answers ONE choice whatever ``n`` asks. For the collection tests: each completion waits
    ``delay_s`` (the most requests it held at once is :attr:`most_in_flight`); ``refuse`` lists what it answers 400
    to (``"n"``: n > 1, ``"lists"``: a list of text prompts); ``echo_text`` answers each choice with the text
    ``"<prompt>|<seed>|<choice index within its prompt>"`` (one token) instead of ``choice``; ``per_prompt`` answers a
    list of prompts as llama.cpp's llama-server does, with a JSON array of one completion object per prompt."""

    def __init__(
        self,
        mode: str = "ok",
        *,
        bad: int = 1_000_000,
        card: dict[str, Any] | None = None,
        choice: dict[str, Any] | None = None,
        delay_s: float = 0.0,
        refuse: tuple[str, ...] = (),
        echo_text: bool = False,
        per_prompt: bool = False,
    ) -> None:
        self.mode, self.bad, self.card = mode, bad, {"max_model_len": 256, **(card or {})}
        self.choice = choice or VALID_CHOICE
        self.delay_s, self.refuse, self.echo_text, self.per_prompt = delay_s, refuse, echo_text, per_prompt
        self.in_flight = self.most_in_flight = 0
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, payload: bytes, dribble: bool = False) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                try:
                    if not dribble:
                        self.wfile.write(payload)
                        return
                    for i in range(len(payload)):
                        self.wfile.write(payload[i : i + 1])
                        self.wfile.flush()
                        time.sleep(0.2)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:
                self._send(json.dumps({"object": "list", "data": [{"id": "tiny", **peer.card}]}).encode())

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with peer.lock:
                    peer.bodies.append(body)
                    faulty = peer.mode != "ok" and len(peer.bodies) <= peer.bad
                with peer.lock:
                    peer.in_flight += 1
                    peer.most_in_flight = max(peer.most_in_flight, peer.in_flight)
                time.sleep(peer.delay_s)
                with peer.lock:
                    peer.in_flight -= 1
                if self.path.endswith("/chat/completions"):
                    choice = {"index": 0, "message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop"}
                    answer = {"object": "chat.completion", "model": "tiny", "choices": [choice]}
                    self._send(json.dumps(answer).encode())
                    return
                refused = ("n" in peer.refuse and int(body.get("n") or 1) > 1) or (
                    "lists" in peer.refuse and _prompt_count(body["prompt"]) > 1
                )
                if refused:
                    self.send_error(400, "not supported")
                    return
                n = int(body.get("n") or 1)
                count = _prompt_count(body["prompt"]) * n
                choices = [{**json.loads(json.dumps(peer.choice)), "index": i} for i in range(count)]
                if peer.echo_text:
                    prompts = body["prompt"] if _prompt_count(body["prompt"]) > 1 else [body["prompt"]]
                    for i, choice in enumerate(choices):
                        text = f"{prompts[i // n]}|{body.get('seed')}|{i % n}"
                        block = {"tokens": [text], "token_logprobs": [-0.5], "top_logprobs": [{text: -0.5}]}
                        choice.update(text=text, logprobs={**block, "text_offset": [0]})
                answer = {"object": "text_completion", "model": "tiny", "choices": choices, "usage": {}}
                if peer.per_prompt and isinstance(body["prompt"], list):  # llama-server: one object per prompt
                    parts = [choices[i : i + n] for i in range(0, count, n)]
                    usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
                    self._send(json.dumps([{**answer, "choices": c, "usage": usage} for c in parts]).encode())
                    return
                if faulty:
                    answer = _break(answer, peer.mode)
                self._send(json.dumps(answer).encode(), dribble=faulty and peer.mode == "dribble")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FaultPeer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


CAPS = Capabilities(logprobs=True, top_logprobs=2, token_prompts=False, completions=True, chat_template="local")
"""What the peer gives (the probe is skipped: these tests are about the answers after it)."""
PROBED = ProbeRecord("tiny", texts=["x"], logprobs=[[-1.0]])


@contextlib.contextmanager
def generator(url: str, tokenizer: Any, *, retries: int, timeout_s: float = 5.0, **overrides: Any):
    gen = ServedGenerator(
        ServedSettings(url, "tiny", retries=retries, timeout_s=timeout_s),
        tokenizer=tokenizer,
        capabilities=overrides.pop("capabilities", CAPS),
        probe_record=overrides.pop("probe_record", PROBED),
        **overrides,
    )
    try:
        yield gen
    finally:
        gen.close()


def _one_line(exc: BaseException, *needles: str) -> None:
    text = str(exc)
    assert "\n" not in text
    for needle in needles:
        assert needle in text, text


def test_a_valid_peer_answer_reads_as_sent(tiny_lm_dir):
    with FaultPeer() as peer, generator(peer.base_url, str(tiny_lm_dir), retries=0) as gen:
        got = gen.generate(["Q?"], max_new_tokens=4)[0]
    assert got.text == "Paris" and got.finish_reason == "length"
    np.testing.assert_allclose(got.logprobs, [-0.5, -0.25])


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("logprobs-null", "'logprobs' is not an object"),
        ("nan", "log-prob 1 is not finite"),
        ("positive", "log-prob 0 is a positive log-prob"),
        ("short-list", "2 tokens, 1 log-probs and 2 top-k entries"),
        ("shortened", "the tokens do not make up the text"),
        ("choices", "asked for 1 choice(s), the answer holds 0"),
        ("model", "another model's"),
        ("huge", "answer larger than"),
    ],
)
def test_a_bad_answer_is_retried_then_fails_in_one_line_naming_the_fault(tiny_lm_dir, mode, reason):
    with FaultPeer(mode) as peer, generator(peer.base_url, str(tiny_lm_dir), retries=1) as gen:
        with pytest.raises(ServedModelError) as err:
            gen.generate(["Q?"], max_new_tokens=4)
        assert len(peer.bodies) == 2  # the first attempt and one retry
    _one_line(err.value, peer.base_url, "a completion request failed", reason)


def test_a_bad_answer_then_a_good_one_is_used(tiny_lm_dir):
    with FaultPeer("nan", bad=1) as peer, generator(peer.base_url, str(tiny_lm_dir), retries=2) as gen:
        got = gen.generate(["Q?"], max_new_tokens=4)[0]
        assert len(peer.bodies) == 2
    np.testing.assert_allclose(got.logprobs, [-0.5, -0.25])
    assert all(math.isfinite(v) for v in got.logprobs)


def test_a_dribbling_server_is_cut_off_at_timeout_s_for_the_whole_request(tiny_lm_dir):
    # the answer (~300 bytes) would take a minute at a byte every 0.2 s; no single read ever waits 1 s
    with FaultPeer("dribble") as peer, generator(peer.base_url, str(tiny_lm_dir), retries=0, timeout_s=1.0) as gen:
        began = time.perf_counter()
        with pytest.raises(ServedModelError) as err:
            gen.generate(["Q?"], max_new_tokens=4)
        elapsed = time.perf_counter() - began
    _one_line(err.value, "timed out", "timeout_s = 1 s")
    assert elapsed < 3.0


def test_the_probe_reads_the_context_window_and_eos_ids_the_server_states(tiny_lm_dir):
    from workbench.backends.served import _load_tokenizer

    tokenizer = _load_tokenizer(str(tiny_lm_dir))[0]
    with FaultPeer(card={"max_model_len": 99, "eos_token_id": [7, 3]}) as peer:
        client = ServedClient(ServedSettings(peer.base_url, "tiny", retries=0))
        try:
            caps, record = probe(client, tokenizer)
        finally:
            client.close()
        assert record.context == 99 and caps.eos_token_ids == (3, 7)
        assert caps.logprobs and caps.top_logprobs == 2
        with generator(peer.base_url, str(tiny_lm_dir), retries=0, capabilities=caps, probe_record=record) as gen:
            assert gen.max_context == 99 and {3, 7} <= gen.eos_ids
            assert gen.probe_record.context == 99  # the window it runs with, recorded
            # the model's other EOS ids go to the server as stop_token_ids (vLLM stops there)
            gen.generate(["Q?"], max_new_tokens=4)
            assert peer.bodies[-1]["stop_token_ids"] == [3, 7]


def test_an_unknown_context_window_is_a_one_line_error_and_a_larger_setting_is_refused(tiny_lm_dir):
    chat_only = Capabilities(completions=False, chat_template="server")
    unknown = ProbeRecord("tiny", context=None, texts=["x"], logprobs=[[-1.0]])
    with FaultPeer(card={"max_model_len": None}) as peer:
        with pytest.raises(ServedModelError) as err:
            ServedGenerator(ServedSettings(peer.base_url, "tiny"), capabilities=chat_only, probe_record=unknown)
        _one_line(err.value, "generator.max_context", "context window of 'tiny' is unknown")
        gen = ServedGenerator(
            ServedSettings(peer.base_url, "tiny"), max_context=512, capabilities=chat_only, probe_record=unknown
        )
        assert gen.max_context == 512
        gen.close()
        stated = ProbeRecord("tiny", context=128, texts=["x"], logprobs=[[-1.0]])
        with pytest.raises(ServedModelError) as err:
            ServedGenerator(
                ServedSettings(peer.base_url, "tiny"), max_context=512, capabilities=chat_only, probe_record=stated
            )
        _one_line(err.value, "larger than the context window the server states", "(128)")
    # without a server's word, the model config's max_position_embeddings (the tiny Llama's 256), never 2048
    with FaultPeer() as peer, generator(peer.base_url, str(tiny_lm_dir), retries=0) as gen:
        assert gen.max_context == 256


def test_samples_asked_one_at_a_time_never_share_a_seed_with_another_call(tiny_lm_dir):
    """A chat server that answers one choice whatever ``n`` asks: the client asks for each missing sample on its
    own. Their seeds must differ from every other sample's and call's — the refill of a call with seed 5 must not
    be the call with seed 6."""
    caps = Capabilities(n=True, completions=False, chat_template="server")
    with FaultPeer() as peer:
        gen = ServedGenerator(
            ServedSettings(peer.base_url, "tiny", max_concurrency=1),  # one at a time: the seeds arrive in order
            capabilities=caps,
            probe_record=PROBED,
            max_context=256,
        )
        try:
            prompt = gen.render_chat("Who wrote Hamlet?")
            for seed in (5, 6):
                texts = [g.text for g in gen.generate([prompt], max_new_tokens=4, temperature=0.7, n=3, seed=seed)]
                assert texts == ["Paris"] * 3
        finally:
            gen.close()
    seeds = [body["seed"] for body in peer.bodies]
    assert len(seeds) == 6 and len(set(seeds)) == 6, seeds
    assert seeds[:3] == [5, sample_seed(5, 1), sample_seed(5, 2)]
    assert seeds[3:] == [6, sample_seed(6, 1), sample_seed(6, 2)]


def test_sample_seeds_are_distinct_and_above_every_seed_the_workbench_passes():
    seeds = [sample_seed(s, j) for s in range(200) for j in range(16)]
    assert len(set(seeds)) == len(seeds)
    assert all(2**31 <= v < 2**32 for v in seeds)
    far = [sample_seed(s, j) for s in (2**21, 2**40, -3) for j in range(4)]
    assert len(set(far)) == len(far) and all(2**31 <= v < 2**32 for v in far)


def test_tokens_a_server_writes_empty_for_part_of_a_character_still_make_up_the_text(tiny_lm_dir):
    """llama.cpp writes a token holding part of a multi-byte character as "" (the bytes dropped): not a shortened
    list."""
    tops = [{"Caf": -0.1}, {"": -0.2}, {"": -0.3}]
    choice = {
        "text": "Café",
        "finish_reason": "length",
        "logprobs": {"tokens": ["Caf", "", ""], "token_logprobs": [-0.1, -0.2, -0.3], "top_logprobs": tops},
    }
    with FaultPeer(choice=choice) as peer, generator(peer.base_url, str(tiny_lm_dir), retries=0) as gen:
        got = gen.generate(["Q?"], max_new_tokens=4)[0]
    assert got.text == "Café" and len(got.logprobs) == 3


def test_a_completion_whose_logprobs_come_in_the_per_token_form_reads_as_the_legacy_one(tiny_lm_dir):
    """llama.cpp's llama-server answers /v1/completions with ``logprobs.content`` (one item per token, as chat does)
    instead of the legacy token lists: the same tokens, log-probs and top k."""
    items = [
        {"token": token, "logprob": value, "top_logprobs": [{"token": k, "logprob": v} for k, v in top.items()]}
        for token, value, top in zip(
            VALID_CHOICE["logprobs"]["tokens"],
            VALID_CHOICE["logprobs"]["token_logprobs"],
            VALID_CHOICE["logprobs"]["top_logprobs"],
            strict=True,
        )
    ]
    per_token = {**VALID_CHOICE, "logprobs": {"content": items}}
    got = []
    for choice in (VALID_CHOICE, per_token):
        with FaultPeer(choice=choice) as peer, generator(peer.base_url, str(tiny_lm_dir), retries=0) as gen:
            got.append(gen.generate(["Q?"], max_new_tokens=4)[0])
    assert got[1].text == got[0].text == "Paris"
    np.testing.assert_array_equal(got[1].logprobs, [-0.5, -0.25])
    np.testing.assert_array_equal(got[1].entropies, got[0].entropies)  # read from the top k
    from workbench.backends.served_answers import InvalidAnswer, completion_logprobs

    with pytest.raises(InvalidAnswer, match="holds no echoed prompt"):
        completion_logprobs(per_token, "choice 0", width=2, echo=True)


def test_a_list_of_prompts_answered_with_one_completion_object_per_prompt_is_joined_in_order(tiny_lm_dir):
    """llama-server answers a list of prompts with a JSON array, one completion per prompt, each holding its choice
    with its index in the whole list: the client joins them, so prompt lists work against it."""
    from dataclasses import replace

    from workbench.backends.served_answers import InvalidAnswer, joined_completions

    caps = replace(CAPS, prompt_lists=True)
    with (
        FaultPeer(echo_text=True, per_prompt=True) as peer,
        generator(peer.base_url, str(tiny_lm_dir), retries=0, capabilities=caps, batch_size=8) as gen,
    ):
        got = gen.generate(["a", "b", "c"], max_new_tokens=1)
    assert [g.text.split("|")[0] for g in got] == ["a", "b", "c"]
    assert len(peer.bodies) == 1 and peer.bodies[0]["prompt"] == ["a", "b", "c"]  # one request for the three
    usage = joined_completions([{"model": "m", "choices": [], "usage": {"prompt_tokens": 2}}] * 2)["usage"]
    assert usage["prompt_tokens"] == 4
    with pytest.raises(InvalidAnswer, match="different models"):
        joined_completions([{"model": "a", "choices": []}, {"model": "b", "choices": []}])
    with pytest.raises(InvalidAnswer, match="empty list"):
        joined_completions([])
