"""SIGTERM stops ``serve-model`` and ``serve`` within seconds while a request is being answered: each server runs as a
process of its own (``run_model_server`` / ``run_server``, what the CLI commands call), its work slowed so that the
request would run for 10 s; the signal must end the process long before, the client getting a 503."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from workbench.serve.load import free_port

ROOT = Path(__file__).resolve().parents[3]  # the scripts import tests.unit.serve from the repository root

# Each decoding step of the served tiny model takes 50 ms longer: 200 tokens are 10 s of work.
SERVE_MODEL = """
import sys, time
from workbench.backends.generator import Generator
from workbench.serve.openai_server import run_model_server

generator = Generator(sys.argv[1], max_context=256)
inner = generator.step

def slow_step(*args, **kwargs):
    time.sleep(0.05)
    return inner(*args, **kwargs)

generator.step = slow_step
run_model_server(generator, served_name="tiny", port=int(sys.argv[2]), log_level="warning")
"""

# The fake runtime's "steps" question: 200 steps of 50 ms, each checking for an interruption as the generator does.
SERVE = """
import sys
from tests.unit.serve.fake_runtime import FakeRuntime
from workbench.serve import run_server

run_server(FakeRuntime(step_seconds=0.05), port=int(sys.argv[1]), log_level="warning")
"""


@contextmanager
def _server(script: str, *args: str) -> Iterator[tuple[subprocess.Popen, str]]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-c", script, *args, str(port)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, process.stdout.read().decode(errors="replace")[-2000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server never got ready"
            time.sleep(0.1)
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def _terminated_mid_request(process: subprocess.Popen, url: str, path: str, body: dict[str, Any]) -> float:
    """Send ``body`` to ``path``, SIGTERM the server once it is answering it; the seconds until the process exits
    (the request's answer is checked to be 503)."""
    outcome: dict[str, Any] = {}

    def ask() -> None:
        try:
            outcome["response"] = httpx.post(f"{url}{path}", json=body, timeout=30)
        except httpx.HTTPError as exc:
            outcome["response"] = exc

    asker = threading.Thread(target=ask)
    asker.start()
    deadline = time.monotonic() + 10
    while httpx.get(f"{url}/health", timeout=2).json()["queue"]["running"] == 0:
        assert time.monotonic() < deadline, "the request never started"
        time.sleep(0.02)
    time.sleep(0.3)  # well into the work
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    elapsed = time.monotonic() - began
    asker.join(30)
    response = outcome["response"]
    assert isinstance(response, httpx.Response), response
    assert response.status_code == 503 and "shutting down" in response.text, response.text
    return elapsed


def test_serve_model_exits_within_seconds_of_sigterm_mid_request(tiny_lm_dir):
    body = {"model": "tiny", "prompt": "The capital of France", "max_tokens": 200, "temperature": 0.0}
    with _server(SERVE_MODEL, str(tiny_lm_dir)) as (process, url):
        elapsed = _terminated_mid_request(process, url, "/v1/completions", body)
    assert elapsed < 4.0  # the request had about 10 s of decoding left: it was interrupted, not waited for


def test_serve_exits_within_seconds_of_sigterm_mid_request():
    with _server(SERVE) as (process, url):
        elapsed = _terminated_mid_request(process, url, "/answer", {"question": "steps"})
    assert elapsed < 4.0
