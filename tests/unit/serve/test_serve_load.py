"""``workbench serve`` holds its load: a bounded queue (503 + Retry-After), abandoned requests never computed, a
per-request deadline (504), requests arriving together answered in one batch, a failing request failing alone.

Each test runs its own live server (uvicorn on a free localhost port) over the model-free FakeRuntime; its ``block``
question holds the answering worker until the test releases it, so what is queued behind it is deterministic.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from tests.unit.serve.fake_runtime import FakeRuntime, serving
from workbench.serve import ServeLimits, create_app, run_abandoned


@contextmanager
def blocked_server(limits: ServeLimits, blocker: list[Future] | None = None) -> Iterator[tuple[str, FakeRuntime, Any]]:
    """A live server whose worker is held by a running ``block`` request; yields its URL, the fake runtime and
    ``post(body, timeout=10) -> Future[httpx.Response | Exception]`` (sent from a thread); ``blocker`` (when given)
    receives the block request's future. The block is released and every request finished on exit."""
    runtime = FakeRuntime()
    pool = ThreadPoolExecutor(max_workers=16)
    with serving(create_app(runtime, limits)) as url:

        def send(body: dict[str, Any], timeout: float) -> httpx.Response | Exception:
            try:
                with httpx.Client(base_url=url, timeout=timeout) as client:
                    return client.post("/answer", json=body)
            except httpx.HTTPError as exc:
                return exc

        def post(body: dict[str, Any], timeout: float = 10.0) -> Future:
            return pool.submit(send, body, timeout)

        held = post({"question": "block"})
        if blocker is not None:
            blocker.append(held)
        try:
            assert runtime.block_started.wait(5), "the block request never started"
            yield url, runtime, post
        finally:
            runtime.release.set()
            held.result(15)
            pool.shutdown(wait=True)


def _queue(url: str) -> dict[str, int]:
    return httpx.get(f"{url}/health", timeout=5).json()["queue"]


def _wait_queue(url: str, ready: Callable[[dict[str, int]], bool], what: str, within: float = 5.0) -> dict[str, int]:
    deadline = time.monotonic() + within
    while True:
        queue = _queue(url)
        if ready(queue):
            return queue
        assert time.monotonic() < deadline, f"{what}: queue is {queue}"
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------------------- the queue


def test_a_full_queue_answers_503_with_retry_after_and_the_queued_work_is_answered():
    limits = ServeLimits(max_batch=4, max_queue=5, max_batch_questions=4)
    with blocked_server(limits) as (url, runtime, post):
        four = post({"questions": ["q1", "q2", "q3", "q4"]})
        _wait_queue(url, lambda q: q["queued"] == 4, "four questions queued")
        with httpx.Client(base_url=url, timeout=5) as client:
            began = time.monotonic()
            refused = client.post("/answer", json={"questions": ["q5", "q6"]})  # 4 + 2 > 5
            elapsed = time.monotonic() - began
            fits = post({"question": "q5"})  # 4 + 1 fits
            _wait_queue(url, lambda q: q["queued"] == 5, "the fifth question queued")
            also_refused = client.post("/answer", json={"question": "q6"})
        assert refused.status_code == 503 and also_refused.status_code == 503
        assert elapsed < 1.0, "a refusal must not wait for the model"
        assert int(refused.headers["retry-after"]) >= 1
        detail = refused.json()["detail"]
        assert "4 question(s) are queued (limit 5)" in detail and "\n" not in detail
        runtime.release.set()
        assert four.result(10).status_code == 200 and fits.result(10).status_code == 200
        assert "q6" not in runtime.questions_seen()
        assert [a["question"] for a in four.result().json()["answers"]] == ["q1", "q2", "q3", "q4"]


def test_abandoned_requests_are_dropped_unanswered_and_the_next_caller_is_not_held():
    with blocked_server(ServeLimits()) as (url, runtime, post):
        # eight clients give up after 0.2 s while the worker is busy: their work must never reach the model
        abandoned = [post({"question": f"abandoned {i}"}, timeout=0.2) for i in range(8)]
        assert all(isinstance(f.result(5), httpx.TimeoutException) for f in abandoned)
        queue = _wait_queue(url, lambda q: q["dropped"] == 8, "eight disconnects noticed")
        assert queue["queued"] == 0
        runtime.release.set()
        began = time.monotonic()
        with httpx.Client(base_url=url, timeout=10) as client:
            answer = client.post("/answer", json={"question": "next caller"})
        elapsed = time.monotonic() - began
        assert answer.status_code == 200 and elapsed < 1.0
        assert not [q for q in runtime.questions_seen() if q.startswith("abandoned")]
        assert runtime.calls[-1] == (["next caller"], "d2rag")


def test_a_request_past_its_deadline_is_504_and_its_queued_work_is_never_computed():
    blocker: list[Future] = []
    with blocked_server(ServeLimits(timeout_s=0.5), blocker) as (url, runtime, post):
        late = post({"question": "late"})
        began = time.monotonic()
        with httpx.Client(base_url=url, timeout=10) as client:
            queued_then_expired = client.post("/answer", json={"question": "expired"})
        elapsed = time.monotonic() - began
        assert queued_then_expired.status_code == 504
        assert "0.5 s deadline" in queued_then_expired.json()["detail"]
        assert 0.4 < elapsed < 2.0
        assert late.result(5).status_code == 504
        # the running request cannot be interrupted (the model call is not cancellable), but its client gets 504 on time
        assert blocker[0].result(5).status_code == 504
        runtime.release.set()
        with httpx.Client(base_url=url, timeout=10) as client:
            assert client.post("/answer", json={"question": "in time"}).status_code == 200
        assert "expired" not in runtime.questions_seen() and "late" not in runtime.questions_seen()


# ---------------------------------------------------------------------------------------------------- batching


def test_requests_arriving_together_are_answered_in_one_batch_per_method():
    limits = ServeLimits(max_batch=4, max_batch_questions=8)
    with blocked_server(limits) as (url, runtime, post):
        sent = []
        plan = [
            ({"question": "a1"}, 1),
            ({"questions": ["b1", "b2"], "method": "dtr"}, 3),
            ({"questions": ["a2", "a3"]}, 5),
            ({"question": "a4", "method": "d2rag"}, 6),
            ({"questions": ["b3"], "method": "dtr"}, 7),
        ]
        for body, queued in plan:  # one at a time, so the queue order is known
            sent.append(post(body))
            _wait_queue(url, lambda q, n=queued: q["queued"] == n, f"{queued} questions queued")
        runtime.release.set()
        responses = [f.result(10) for f in sent]
    assert [r.status_code for r in responses] == [200] * 5
    assert [[a["question"] for a in r.json()["answers"]] for r in responses] == [
        ["a1"],
        ["b1", "b2"],
        ["a2", "a3"],
        ["a4"],
        ["b3"],
    ]
    assert [r.json()["method"] for r in responses] == ["d2rag", "dtr", "d2rag", "d2rag", "dtr"]
    # after the block: every d2rag question in one call (the head's method), then every dtr question in one
    assert runtime.calls[1:] == [(["a1", "a2", "a3", "a4"], "d2rag"), (["b1", "b2", "b3"], "dtr")]


def test_a_batch_never_exceeds_max_batch_questions_and_keeps_arrival_order():
    limits = ServeLimits(max_batch=4, max_batch_questions=3)
    with blocked_server(limits) as (url, runtime, post):
        sent = []
        for i, size in enumerate([2, 2, 1]):
            sent.append(post({"questions": [f"r{i}q{j}" for j in range(size)]}))
            _wait_queue(url, lambda q, n=i + 1: q["queued_requests"] == n, "requests queued")
        runtime.release.set()
        assert all(f.result(10).status_code == 200 for f in sent)
    # r0 (2) fits; r1 (2) would make 4 > 3, so it heads the next batch; r2 must not overtake r1
    assert runtime.calls[1:] == [(["r0q0", "r0q1"], "d2rag"), (["r1q0", "r1q1", "r2q0"], "d2rag")]


def test_a_failing_request_in_a_batch_fails_alone():
    with blocked_server(ServeLimits()) as (url, runtime, post):
        bad = post({"question": "raise data error"})
        _wait_queue(url, lambda q: q["queued"] == 1, "the bad request queued")
        good = post({"question": "good"})
        _wait_queue(url, lambda q: q["queued"] == 2, "the good request queued")
        runtime.release.set()
        assert bad.result(10).status_code == 422 and "cannot be answered" in bad.result().json()["detail"]
        assert good.result(10).status_code == 200
        assert good.result().json()["answers"][0]["text"] == "answer to good"


# ---------------------------------------------------------------------------------------------------- tools


def test_run_abandoned_reports_what_abandoned_requests_cost_the_next_caller():
    # the patient request holds the worker 1.5 s: the abandoned clients (0.2 s each) must have given up before it
    # ends even on a loaded machine (with 0.5 s one full-suite run on a busy 2-core machine saw none dropped)
    runtime = FakeRuntime(slow_seconds=1.5)
    with serving(create_app(runtime, ServeLimits())) as url:
        report = run_abandoned(url, [{"question": "slow"}], abandoned=3, give_up_s=0.2, timeout=10)
        idle = run_abandoned(url, [{"question": "quick"}], abandoned=2, give_up_s=2.0, busy=False, timeout=10)
    # a patient request held the worker (1.5 s), the three abandoned ones queued behind it and were dropped
    assert report["abandoned"] == 3 and report["give_up_s"] == 0.2 and report["busy"] is True
    assert report["gave_up"] == 3 and report["answered_in_time"] == 0 and report["dropped"] == 3
    assert report["next_status"] == "200" and report["next_latency_s"] < 3.0
    assert runtime.questions_seen().count("slow") == 2  # the patient request and the next caller's
    assert idle["busy"] is None and idle["gave_up"] == 0 and idle["answered_in_time"] == 2 and idle["dropped"] == 0


def test_runtime_count_tokens_uses_the_generators_tokenizer():
    from tests.tiny_models import build_tiny_tokenizer
    from workbench.runtime.runtime import Runtime

    tokenizer = build_tiny_tokenizer()
    tools = SimpleNamespace(generator=SimpleNamespace(tokenizer=tokenizer))
    runtime = SimpleNamespace(_tools=tools)  # count_tokens reads the built tools only
    texts = ["The capital of France is Paris.", "\U0001f600" * 10, ""]
    counts = Runtime.count_tokens(runtime, texts)  # type: ignore[arg-type]
    expected = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    assert counts == expected
    assert counts[1] >= 20 > len(texts[1])  # emoji: few characters, many byte-level tokens
    assert Runtime.count_tokens(runtime, []) == []  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "blank"),
    [
        ("", True),
        (" \t\n", True),
        ("\u200b\u200c\u200d\u2060\ufeff", True),
        ("\u202e\u2066\u00ad", True),  # bidi override, isolate, soft hyphen
        ("\u3164\u115f\u2800", True),  # Hangul fillers, blank Braille
        ("\u0301\u20dd", True),  # combining marks with nothing to sit on
        ("\u3000\u00a0", True),  # ideographic and no-break spaces
        ("a", False),
        ("\u200ba\u200b", False),
        ("\U0001f600", False),
        ("?", False),
    ],
)
def test_is_blank(text, blank):
    from workbench.serve import is_blank

    assert is_blank(text) is blank


def test_health_answers_at_once_while_the_queue_is_full_and_the_worker_busy():
    limits = ServeLimits(max_batch=2, max_queue=2)
    with blocked_server(limits) as (url, _, post):
        post({"questions": ["x", "y"]})
        _wait_queue(url, lambda q: q["queued"] == 2, "queue full")
        with httpx.Client(base_url=url, timeout=5) as client:
            began = time.monotonic()
            health = client.get("/health")
            elapsed = time.monotonic() - began
    assert health.status_code == 200 and elapsed < 1.0  # the worker stays blocked (up to 10 s): /health did not wait
    assert health.json()["queue"]["running"] == 1 and health.json()["queue"]["queued"] == 2


def test_shutdown_answers_waiting_requests_503():
    runtime = FakeRuntime()
    app = create_app(runtime, ServeLimits())
    results: dict[str, Any] = {}
    with serving(app) as url:

        def waiting() -> None:
            with httpx.Client(base_url=url, timeout=10) as client:
                results["block"] = client.post("/answer", json={"question": "block"})

        blocker = threading.Thread(target=waiting)
        blocker.start()
        assert runtime.block_started.wait(5)
        job = app.state.scheduler.submit(["queued"], "d2rag", time.monotonic() + 60)
        app.state.scheduler.close()
        runtime.release.set()
        blocker.join(10)
    assert results["block"].status_code == 200  # the running batch finishes
    with pytest.raises(Exception, match="shutting down"):
        job.future.result(5)
    assert "queued" not in runtime.questions_seen()
