"""Liveness vs readiness (issue 42 item 8): ``GET /health`` answers from the moment the server is bound, ``GET /ready``
only once the runtime is warm — every method's models loaded and one warm-up answer run with each — as Kubernetes
probes expect; a real bundle's first answer after ready is no slower than the next ones; a warm-up that fails stops
the server with its one-line error; ``--lazy`` is ready at once."""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

import httpx
import pytest

from tests.unit.serve.fake_runtime import FakeRuntime, serving
from workbench.core.errors import AssetError
from workbench.core.interrupt import check_interrupt
from workbench.serve import ServeLimits, create_app, run_server
from workbench.serve.readiness import WarmUp


def _wait_ready(client: httpx.Client, within_s: float = 60.0) -> None:
    deadline = time.monotonic() + within_s
    while client.get("/ready").status_code != 200:
        assert time.monotonic() < deadline, "the server never became ready"
        time.sleep(0.01)


def test_health_is_live_while_ready_waits_for_the_warm_up():
    runtime = FakeRuntime(warm_seconds=1.5)
    with serving(create_app(runtime)) as url, httpx.Client(base_url=url, timeout=10) as client:
        health = client.get("/health")
        assert health.status_code == 200 and health.json()["status"] == "ok" and health.json()["ready"] is False
        ready = client.get("/ready")
        assert ready.status_code == 503 and ready.headers["retry-after"] == "1"
        detail = ready.json()["detail"]
        assert detail.startswith("not ready: warming up for ") and "\n" not in detail
        began = time.monotonic()
        _wait_ready(client)
        assert time.monotonic() - began > 0.5  # ready only once the warm-up has run, not at once
        body = client.get("/ready").json()
        assert body["status"] == "ready" and body["warm_up_s"] >= 1.5
        assert client.get("/health").json()["ready"] is True
    assert runtime.warm_calls == [True]  # warmed once, with a warm-up answer


def test_a_request_before_ready_waits_for_the_warm_up_and_is_answered():
    runtime = FakeRuntime(warm_seconds=0.5)
    with serving(create_app(runtime)) as url, httpx.Client(base_url=url, timeout=10) as client:
        response = client.post("/answer", json={"question": "early?"})
        assert response.status_code == 200 and response.json()["answers"][0]["text"] == "answer to early?"


def test_lazy_is_ready_at_once_and_warms_nothing():
    runtime = FakeRuntime(warm_seconds=5.0)
    with serving(create_app(runtime, warm=False)) as url, httpx.Client(base_url=url, timeout=10) as client:
        ready = client.get("/ready")
        assert ready.status_code == 200 and ready.json() == {"status": "ready", "warm_up_s": 0.0}
    assert runtime.warm_calls == []


def test_a_failed_warm_up_stops_the_server_and_raises_its_error():
    runtime = FakeRuntime(warm_seconds=0.3, warm_error=AssetError("no such generator 'gone'", "bundle generator"))
    raised: list[BaseException] = []

    def serve() -> None:
        try:
            run_server(runtime, port=0, log_level="warning")
        except BaseException as exc:  # the test inspects what run_server raised
            raised.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the server kept running after its warm-up failed"
    assert len(raised) == 1 and isinstance(raised[0], AssetError)
    assert str(raised[0]) == "bundle generator: no such generator 'gone'"


def test_shutdown_stops_a_running_warm_up_at_its_next_check():
    checks = []

    def endless() -> None:
        while True:
            checks.append(time.monotonic())
            check_interrupt()
            time.sleep(0.01)

    warm_up = WarmUp(endless)
    warm_up.start()
    deadline = time.monotonic() + 10
    while not checks:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert warm_up.status()["state"] == "warming" and not warm_up.ready
    warm_up.close()
    warm_up.join(5)
    assert warm_up.status()["state"] == "stopped" and not warm_up.ready and warm_up.failure is None


@pytest.fixture(scope="module")
def cold(tmp_path_factory, tiny_lm_long_dir, tiny_encoder_dir) -> Any:
    """The committed fixture bundle loaded on the tiny models, nothing built yet (a cold start)."""
    from tests.bundle_run import load_fixture_on_tiny_models

    work = tmp_path_factory.mktemp("readiness")
    return load_fixture_on_tiny_models(work, tiny_lm_long_dir, tiny_encoder_dir, passages=300)


def test_a_real_bundle_is_ready_only_once_warm_and_its_first_answer_is_no_slower_than_the_next(cold):
    runtime = cold
    assert runtime._tools is None and not runtime._built  # nothing loaded: the warm-up has everything to do
    with serving(create_app(runtime, ServeLimits())) as url, httpx.Client(base_url=url, timeout=60) as client:
        assert client.get("/health").status_code == 200
        _wait_ready(client)
        # ready means every method built and answered once (the warm-up's model calls), before any request
        assert set(runtime._built) == set(runtime.methods)
        assert runtime.counter.lm_calls >= len(runtime.methods)
        assert client.get("/health").json()["queue"]["answered"] == 0
        questions = ["Who wrote Hamlet?", "Where does the Nile flow?", "Who painted the Mona Lisa?", "What is DNA?"]
        times = []
        for question in questions * 2:  # 8 answers: the first after ready, then the next ones
            began = time.perf_counter()
            response = client.post("/answer", json={"question": question, "method": "d2rag"})
            times.append(time.perf_counter() - began)
            assert response.status_code == 200, response.text
    first, rest = times[0], statistics.median(times[1:])
    # generous: twice the next answers' median plus 100 ms of scheduling noise (the ready checks above are what a
    # cold start fails; on the tiny models loading costs little)
    assert first <= 2 * rest + 0.1, (first, times[1:])
