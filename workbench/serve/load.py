"""A bounded HTTP load generator for a running ``workbench serve`` (real requests over a socket, via httpx), and a
``workbench serve`` in a separate process to point it at (:func:`serve_process`)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from workbench.core.errors import ConfigError, WorkbenchError


def _percentile(sorted_values: list[float], q: float) -> float | None:
    """Linearly interpolated percentile (``q`` in [0, 1]) of already-sorted values; None when empty."""
    if not sorted_values:
        return None
    pos = q * (len(sorted_values) - 1)
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def run_load(
    base_url: str,
    bodies: list[dict[str, Any]],
    *,
    total: int = 200,
    concurrency: int = 8,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """Send ``total`` ``POST {base_url}/answer`` requests, cycling through ``bodies``, ``concurrency`` at a time.

    Each worker thread sends its next request as soon as its previous one has been answered (a closed loop), over one
    shared keep-alive connection pool. Returns ``{"requests", "concurrency", "errors", "status_counts", "p50_s",
    "p95_s", "max_s", "seconds", "throughput_rps"}``: ``errors`` counts non-2xx answers and transport exceptions
    (timeouts, refused connections); ``status_counts`` maps each status code (as a string) or exception class name to
    its count; the latency percentiles are over the successful (2xx) requests (None when none succeeded);
    ``throughput_rps`` is requests answered (any status) per wall-clock second. Raises a one-line
    :class:`ConfigError` for an empty ``bodies``, ``total`` or ``concurrency`` < 1, or ``timeout`` <= 0.
    """
    import httpx  # only here: importing workbench.serve stays light

    if not bodies or not all(isinstance(b, dict) for b in bodies):
        raise ConfigError("bodies must be a non-empty list of JSON objects (dicts)", "run_load.bodies")
    for name, value in (("total", total), ("concurrency", concurrency)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be an integer >= 1, got {value!r}", f"run_load.{name}")
    if not timeout > 0:
        raise ConfigError(f"timeout must be > 0 seconds, got {timeout!r}", "run_load.timeout")

    url = base_url.rstrip("/") + "/answer"
    workers = min(concurrency, total)
    lock = threading.Lock()
    next_index = 0
    latencies: list[float] = []  # successful requests only
    statuses: Counter[str] = Counter()
    errors = 0

    def worker(client: httpx.Client) -> None:
        nonlocal next_index, errors
        while True:
            with lock:
                if next_index >= total:
                    return
                index = next_index
                next_index += 1
            began = time.perf_counter()
            try:
                response = client.post(url, json=bodies[index % len(bodies)])
                key, ok = str(response.status_code), response.is_success
            except httpx.HTTPError as exc:
                key, ok = type(exc).__name__, False
            elapsed = time.perf_counter() - began
            with lock:
                statuses[key] += 1
                if ok:
                    latencies.append(elapsed)
                else:
                    errors += 1

    pool_limits = httpx.Limits(max_connections=workers, max_keepalive_connections=workers)
    with httpx.Client(timeout=timeout, limits=pool_limits) as client:
        began = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="run-load") as pool:
            for future in [pool.submit(worker, client) for _ in range(workers)]:
                future.result()  # re-raise a worker's unexpected (non-HTTP) exception
        seconds = time.perf_counter() - began

    latencies.sort()
    done = sum(statuses.values())
    return {
        "requests": done,
        "concurrency": workers,
        "errors": errors,
        "status_counts": dict(sorted(statuses.items())),
        "p50_s": _percentile(latencies, 0.50),
        "p95_s": _percentile(latencies, 0.95),
        "max_s": latencies[-1] if latencies else None,
        "seconds": seconds,
        "throughput_rps": done / seconds if seconds > 0 else None,
    }


def run_abandoned(
    base_url: str,
    bodies: list[dict[str, Any]],
    *,
    abandoned: int = 8,
    give_up_s: float = 0.5,
    busy: bool = True,
    timeout: float = 600.0,
    patient_body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What abandoned requests cost the next caller, on a live server.

    With ``busy`` (the default), a patient client first sends ``patient_body`` (default ``bodies[0]``; a batch of
    questions keeps the server busy longer than ``give_up_s``) and the others wait until ``GET /health`` shows the
    server answering it (``queue.running`` > 0, for at most 30 s): as on a loaded server, the abandoned requests then
    queue behind a running batch. ``abandoned`` clients send ``POST {base_url}/answer`` at once (cycling through
    ``bodies``) and disconnect after ``give_up_s`` seconds without an answer; once they all have, one more client
    sends ``bodies[0]`` and waits (up to ``timeout``) for its answer.

    Returns ``{"abandoned", "give_up_s", "busy", "patient_questions", "gave_up", "answered_in_time", "next_status",
    "next_latency_s", "dropped"}``: ``patient_questions`` is how many questions the patient client asked; ``busy``
    is whether the server was answering when the abandoned requests were sent (None when it does not report it, or
    not asked); ``gave_up`` counts the clients that disconnected (the others were answered within ``give_up_s``);
    ``next_status`` / ``next_latency_s`` are the next caller's status code (or exception class name) and seconds;
    ``dropped`` is how many requests the server reports having dropped unanswered meanwhile (from ``GET /health``'s
    queue counts; None when it does not report them). One-line :class:`ConfigError` for bad
    arguments.
    """
    import httpx

    if not bodies or not all(isinstance(b, dict) for b in bodies):
        raise ConfigError("bodies must be a non-empty list of JSON objects (dicts)", "run_abandoned.bodies")
    if isinstance(abandoned, bool) or not isinstance(abandoned, int) or abandoned < 1:
        raise ConfigError(f"abandoned must be an integer >= 1, got {abandoned!r}", "run_abandoned.abandoned")
    if not give_up_s > 0 or not timeout > 0:
        raise ConfigError("give_up_s and timeout must be > 0 seconds", "run_abandoned")
    root = base_url.rstrip("/")

    def queue() -> dict[str, Any] | None:
        try:
            counts = httpx.get(f"{root}/health", timeout=10.0).json()["queue"]
            return {"dropped": int(counts["dropped"]), "running": int(counts["running"])}
        except (httpx.HTTPError, KeyError, TypeError, ValueError):
            return None

    def ask(body: dict[str, Any], limit: float) -> str:
        # Its own client, so a disconnect closes a socket the server sees close.
        try:
            with httpx.Client(timeout=limit) as client:
                return str(client.post(f"{root}/answer", json=body).status_code)
        except httpx.HTTPError as exc:
            return type(exc).__name__

    before = queue()
    with ThreadPoolExecutor(max_workers=abandoned + 1, thread_name_prefix="run-abandoned") as pool:
        patient_body = patient_body or bodies[0]
        patient = pool.submit(ask, patient_body, timeout) if busy else None
        answering: bool | None = None
        if patient is not None and before is not None:
            until = time.monotonic() + 30.0
            while not patient.done() and time.monotonic() < until:
                state = queue()
                if state is None or state["running"] > 0:
                    answering = None if state is None else True
                    break
                time.sleep(0.005)
            else:
                answering = False  # answered (or timed out) before it was seen running
        outcomes = list(pool.map(lambda i: ask(bodies[i % len(bodies)], give_up_s), range(abandoned)))
        gave_up = sum(status in ("ReadTimeout", "WriteTimeout", "ConnectTimeout", "PoolTimeout") for status in outcomes)
        began = time.perf_counter()
        status = ask(bodies[0], timeout)
        latency = time.perf_counter() - began
        if patient is not None:
            patient.result()
    after = queue()
    return {
        "abandoned": abandoned,
        "give_up_s": give_up_s,
        "busy": answering,
        "patient_questions": len(patient_body.get("questions") or [None]) if busy else 0,
        "gave_up": gave_up,
        "answered_in_time": sum(status == "200" for status in outcomes),
        "next_status": status,
        "next_latency_s": latency,
        "dropped": None if before is None or after is None else after["dropped"] - before["dropped"],
    }


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def server_process(
    command: Sequence[str],
    ready_url: str,
    *,
    what: str = "serve",
    ready_timeout: float = 300.0,
    log_path: Path | None = None,
) -> Iterator[None]:
    """Run ``command`` (an HTTP server) until the block ends, once ``GET ready_url`` answers 200; its output goes to
    ``log_path`` (a temporary file when None). A server that dies or never gets ready is a one-line
    :class:`~workbench.core.errors.WorkbenchError` at ``what`` with the end of its output."""

    import httpx

    with open(log_path, "w+b") if log_path is not None else tempfile.TemporaryFile() as log:
        process = subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + ready_timeout
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    tail = log.read().decode("utf-8", "replace").strip().splitlines()[-1:]
                    raise WorkbenchError(f"the server exited ({process.returncode}): {' '.join(tail)}", what)
                try:
                    if httpx.get(ready_url, timeout=2.0).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise WorkbenchError(f"the server was not ready after {ready_timeout:.0f} s", what)
                time.sleep(0.25)
            yield
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextlib.contextmanager
def serve_process(
    bundle: str | Path, *, args: Sequence[str] = (), port: int | None = None, ready_timeout: float = 300.0
) -> Iterator[str]:
    """Run ``workbench serve --bundle BUNDLE`` in a separate process on a free localhost port; yield its base URL
    once ``GET /ready`` answers 200 (warm, unless ``args`` hold ``--lazy``); stop it on exit (see
    :func:`server_process`)."""

    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "workbench", "--quiet", "serve", "--bundle", str(bundle), "--port", str(port)]
    with server_process([*command, *args], f"{url}/ready", ready_timeout=ready_timeout):
        yield url
