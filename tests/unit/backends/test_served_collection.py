"""Collection on a served engine at the engine's speed: the requests of one call are in flight together (up to
``max_concurrency``, counted at a slow peer), answers keep their order, samples go as ``n`` or — where the server
refuses ``n`` — one choice per sample with its own seed, as prompt lists where the server takes them; the probe finds
what the server refuses; one failed request fails the call in one line and drops the requests not yet sent. Against
our own server (``serve-model`` on the tiny Llama): every path gives the samples its seed rule states."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any

import pytest

from tests.unit.backends.test_served_faults import CAPS, PROBED, FaultPeer
from workbench.backends.served import ServedGenerator, sample_seed
from workbench.backends.served_client import ServedClient, ServedModelError, ServedSettings
from workbench.backends.served_probe import probe

DELAY_S = 0.3
"""How long the slow peer holds each request."""


@contextlib.contextmanager
def _generator(peer: FaultPeer, *, concurrency: int, retries: int = 0, **caps: Any):
    gen = ServedGenerator(
        ServedSettings(peer.base_url, "tiny", retries=retries, max_concurrency=concurrency),
        capabilities=dataclasses.replace(CAPS, **caps),
        probe_record=PROBED,
        max_context=256,
    )
    try:
        yield gen
    finally:
        gen.close()


def _texts(gens) -> list[str]:
    return [g.text for g in gens]


def test_requests_overlap_up_to_max_concurrency_and_answers_keep_their_order():
    prompts = [f"q{i}" for i in range(12)]
    with FaultPeer(delay_s=DELAY_S, echo_text=True) as peer, _generator(peer, concurrency=4, n=True) as gen:
        start = time.perf_counter()
        got = gen.generate(prompts, max_new_tokens=4, stop=())
        seconds = time.perf_counter() - start
    assert _texts(got) == [f"{p}|None|0" for p in prompts]  # greedy: no seed sent; each answer in its prompt's place
    assert peer.most_in_flight == 4 and len(peer.bodies) == 12
    assert seconds < 12 * DELAY_S / 2  # one at a time would take 3.6 s
    with FaultPeer(delay_s=0.05, echo_text=True) as peer, _generator(peer, concurrency=1, n=True) as gen:
        assert _texts(gen.generate(prompts[:3], max_new_tokens=4, stop=())) == [f"{p}|None|0" for p in prompts[:3]]
    assert peer.most_in_flight == 1


def test_without_n_every_sample_is_its_own_request_with_its_seed_all_in_flight_together():
    with FaultPeer(delay_s=DELAY_S, echo_text=True) as peer, _generator(peer, concurrency=8, n=False) as gen:
        got = gen.generate(["a", "b"], max_new_tokens=4, temperature=0.7, n=3, seed=5, stop=())
    assert _texts(got) == [f"{p}|{sample_seed(5, j)}|0" for p in "ab" for j in range(3)]
    assert [g.sample_index for g in got] == [0, 1, 2, 0, 1, 2]
    assert len(peer.bodies) == 6 and all(b.get("n") == 1 for b in peer.bodies)
    assert peer.most_in_flight == 6  # not one prompt's samples after another


def test_without_n_samples_go_as_prompt_lists_one_list_per_sample_index():
    with (
        FaultPeer(delay_s=DELAY_S, echo_text=True) as peer,
        _generator(peer, concurrency=8, n=False, prompt_lists=True) as gen,
    ):
        got = gen.generate(["a", "b", "c"], max_new_tokens=4, temperature=0.7, n=2, seed=5, stop=())
    assert _texts(got) == [f"{p}|{sample_seed(5, j)}|0" for p in "abc" for j in range(2)]
    assert sorted((b["seed"], tuple(b["prompt"])) for b in peer.bodies) == [
        (sample_seed(5, j), ("a", "b", "c")) for j in range(2)
    ]
    assert peer.most_in_flight == 2


def test_with_n_and_prompt_lists_one_request_carries_a_batch_and_its_samples():
    with FaultPeer(echo_text=True) as peer, _generator(peer, concurrency=8, n=True, prompt_lists=True) as gen:
        gen.batch_size = 2
        got = gen.generate(["a", "b", "c"], max_new_tokens=4, temperature=0.7, n=2, seed=5, stop=())
    assert _texts(got) == [f"{p}|5|{j}" for p in "abc" for j in range(2)]
    assert sorted(str(b["prompt"]) for b in peer.bodies) == ["['a', 'b']", "c"]
    assert all(b["n"] == 2 and b["seed"] == 5 for b in peer.bodies)


@pytest.mark.parametrize("refuse", [(), ("n", "lists")])
def test_the_probe_finds_whether_n_and_prompt_lists_are_honoured_and_the_client_falls_back(refuse):
    with FaultPeer(refuse=refuse, echo_text=True) as peer:
        client = ServedClient(ServedSettings(peer.base_url, "tiny", retries=0))
        try:
            caps, _ = probe(client)
        finally:
            client.close()
        assert (caps.n, caps.prompt_lists) == ((True, True) if not refuse else (False, False))
        peer.bodies.clear()
        with _generator(peer, concurrency=4, n=caps.n, prompt_lists=caps.prompt_lists) as gen:
            got = gen.generate(["a", "b"], max_new_tokens=4, temperature=0.7, n=2, seed=5, stop=())
    assert [g.sample_index for g in got] == [0, 1, 0, 1]
    if refuse:  # nothing the server refuses is sent: one prompt, one choice per request
        assert len(peer.bodies) == 4 and all(b["n"] == 1 and isinstance(b["prompt"], str) for b in peer.bodies)
    else:
        assert len(peer.bodies) == 1 and peer.bodies[0]["n"] == 2 and peer.bodies[0]["prompt"] == ["a", "b"]


def test_a_failed_request_fails_the_call_in_one_line_and_drops_the_requests_not_yet_sent():
    prompts = [f"q{i}" for i in range(12)]
    with FaultPeer("model", bad=1, delay_s=DELAY_S) as peer, _generator(peer, concurrency=2, n=True) as gen:
        with pytest.raises(ServedModelError) as err:
            gen.generate(prompts, max_new_tokens=4, stop=())
        sent = len(peer.bodies)
    text = str(err.value)
    assert "\n" not in text and "a completion request failed" in text and "another model" in text, text
    assert sent < len(prompts)  # the queued ones were not sent after the failure


def test_chat_samples_the_server_left_out_are_asked_for_together():
    """A chat server that answers one choice whatever ``n`` asks: the missing samples of every prompt go out
    together, each with its own seed."""
    caps = {"n": True, "completions": False, "chat_template": "server", "logprobs": False, "top_logprobs": 0}
    with FaultPeer(delay_s=DELAY_S) as peer, _generator(peer, concurrency=8, **caps) as gen:
        prompts = [gen.render_chat("Who wrote Hamlet?"), gen.render_chat("Where is Kyoto?")]
        got = gen.generate(prompts, max_new_tokens=4, temperature=0.7, n=3, seed=5)
    assert [g.sample_index for g in got] == [0, 1, 2, 0, 1, 2]
    assert sorted(b["seed"] for b in peer.bodies) == sorted([5, 5] + [sample_seed(5, j) for j in (1, 2)] * 2)
    assert peer.most_in_flight == 4  # both prompts' refills at once
