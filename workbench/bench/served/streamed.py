"""Streamed chat requests against a running OpenAI-compatible server: time to first token, latency and tokens/s per
concurrency (bench-served's streaming rows).

:func:`stream_load` keeps ``concurrency`` one-prompt ``stream: true`` chat requests in flight (a closed loop: each
worker sends its next request when its previous stream ended), as a chat front-end does, and times each request's
first ``data:`` event carrying text (the time to first token a user sees) and its last (the whole answer).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np


def _streamed(client: httpx.Client, url: str, body: dict[str, Any]) -> tuple[float, float, int]:
    """``(seconds to the first text, seconds to the end, completion tokens)`` of one streamed request; raises
    :class:`httpx.HTTPError` (or ValueError for a stream that is not OpenAI's) when it fails."""
    began = time.perf_counter()
    first, tokens = None, 0
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: ") :])
            if first is None and any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or []):
                first = time.perf_counter() - began
            if chunk.get("usage"):
                tokens = int(chunk["usage"].get("completion_tokens") or 0)
    total = time.perf_counter() - began
    return (total if first is None else first), total, tokens


def stream_load(
    base_url: str,
    model: str,
    questions: Sequence[str],
    *,
    concurrency: int,
    requests: int,
    max_tokens: int,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Send ``requests`` streamed chat requests to ``{base_url}/chat/completions`` (``base_url`` ends in ``/v1``), one
    question each (cycling through ``questions``), greedy, ``max_tokens`` tokens at most, ``concurrency`` at a time.

    Returns ``{"concurrency", "requests", "errors", "reconnects", "ttft_p50_s", "ttft_p95_s", "p50_s", "p95_s",
    "tokens_per_s", "seconds"}``: time-to-first-token and whole-request percentiles over the requests that succeeded
    (None when none did), and completion tokens (from ``stream_options.include_usage``) per wall-clock second. A
    request whose kept-alive connection the server had closed is sent once more (``reconnects``); one that fails
    again counts in ``errors``."""
    if not questions or concurrency < 1 or requests < 1:
        raise ValueError("stream_load needs questions, concurrency >= 1 and requests >= 1")
    url = base_url.rstrip("/") + "/chat/completions"
    lock, taken = threading.Lock(), [0]
    firsts: list[float] = []
    totals: list[float] = []
    tokens, errors, reconnects = [0], [0], [0]

    def worker(client: httpx.Client) -> None:
        while True:
            with lock:
                if taken[0] >= requests:
                    return
                index = taken[0]
                taken[0] += 1
            body = {
                "model": model,
                "messages": [{"role": "user", "content": questions[index % len(questions)]}],
                "max_tokens": max_tokens,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            try:
                try:
                    first, total, count = _streamed(client, url, body)
                except httpx.RemoteProtocolError:
                    # a kept-alive connection the server had closed (llama-server does, now and then): sent again
                    # on a new one, as the openai client does; the failed attempt took no server time
                    with lock:
                        reconnects[0] += 1
                    first, total, count = _streamed(client, url, body)
            except (httpx.HTTPError, ValueError):
                with lock:
                    errors[0] += 1
                continue
            with lock:
                firsts.append(first)
                totals.append(total)
                tokens[0] += count

    workers = min(concurrency, requests)
    limits = httpx.Limits(max_connections=workers, max_keepalive_connections=workers)
    with httpx.Client(timeout=timeout, limits=limits) as client:
        began = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stream-load") as pool:
            for future in [pool.submit(worker, client) for _ in range(workers)]:
                future.result()
        seconds = time.perf_counter() - began

    def pct(values: list[float], q: float) -> float | None:
        return float(np.percentile(values, q)) if values else None

    return {
        "concurrency": workers,
        "requests": requests,
        "errors": errors[0],
        "reconnects": reconnects[0],
        "ttft_p50_s": pct(firsts, 50),
        "ttft_p95_s": pct(firsts, 95),
        "p50_s": pct(totals, 50),
        "p95_s": pct(totals, 95),
        "tokens_per_s": tokens[0] / seconds if seconds > 0 else None,
        "seconds": seconds,
    }
