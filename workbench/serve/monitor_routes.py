"""Drift monitoring in ``serve``: ``GET /metrics`` (Prometheus text format, ``prometheus-client``) and ``GET /drift``
(JSON), over the app's :class:`~workbench.monitoring.window.RollingMonitor` (docs/monitoring.md).

``/metrics`` holds the app's own registry (never the process-global one, so two apps in one process do not mix):

* ``workbench_requests_total{route, method, status}`` and ``workbench_request_seconds{route}`` (histogram), counted
  by :class:`RequestMetrics`, an ASGI middleware around the whole app (413s and 404s included). ``route`` is one of
  the app's routes or ``other`` and ``method`` one of the HTTP methods or ``other``: nothing a client sends
  becomes a label;
* computed at each scrape from the monitor and the OOD tally (:class:`MonitorCollector`): ``workbench_answers_total``,
  ``workbench_ood_checked_total`` / ``workbench_ood_flagged_total``, and over the rolling window
  ``workbench_retrieval_rate``, ``workbench_p_correct_mean``, ``workbench_ood_rate``, ``workbench_window_answers``,
  and per series (``feature:<name>``, ``p_correct``, ``retrieval``, ``ood``) ``workbench_drift_psi``,
  ``workbench_drift_psi_threshold``, ``workbench_drift_ks``, ``workbench_drift_alarm`` (0/1) and
  ``workbench_reference_mean``; ``workbench_drift_reference`` is 0 for a bundle without a reference.

No question or answer text ever reaches either route: the monitor keeps numbers only (its records are
:func:`~workbench.monitoring.answer_log.log_record`'s), and labels are route names, HTTP methods, status codes and the
bundle's own series names.
"""

# No ``from __future__ import annotations``: FastAPI reads the annotations as objects.

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workbench.serve.answer_schema import OODTally
from workbench.serve.answering import json_safe

logger = logging.getLogger("workbench.serve")

ROUTES = frozenset(
    {
        "/health",
        "/ready",
        "/methods",
        "/answer",
        "/metrics",
        "/drift",
        "/v1/models",
        "/v1/chat/completions",
        "/docs",
        "/redoc",
        "/openapi.json",
    }
)
"""Paths counted under their own name; any other path is ``other``."""

HTTP_METHODS = frozenset({"GET", "POST", "HEAD", "OPTIONS", "PUT", "PATCH", "DELETE"})

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Request seconds: from a health check (milliseconds) to a batch answered at the default 120 s deadline."""


def open_monitor(runtime: Any, answer_log: str | Path | None) -> Any:
    """The :class:`~workbench.monitoring.window.RollingMonitor` of ``runtime``'s bundle: its reference read through
    the bundle's verified files (none for a bundle without one, or a runtime without a bundle's files), appending to
    ``answer_log`` when given (a StorageError when it cannot be opened)."""
    from workbench.monitoring.reference import read_reference
    from workbench.monitoring.window import RollingMonitor

    files, manifest = getattr(runtime, "files", None), getattr(runtime, "manifest", None)
    reference = None
    if files is not None and isinstance(manifest, dict):
        reference = read_reference(files, manifest, str(Path(getattr(runtime, "root", ".")) / "manifest.json"))
    return RollingMonitor.open(reference, str(runtime.name), str(runtime.version), answer_log)


class ServeMetrics:
    """The app's Prometheus registry: the request counter and latency histogram, and the monitor's collector."""

    def __init__(self, monitor: Any, ood: OODTally) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "workbench_requests",
            "HTTP requests answered, by route, HTTP method and status code",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "workbench_request_seconds",
            "Seconds from a request's arrival to the end of its response, by route",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(MonitorCollector(monitor, ood))

    def observe(self, path: str, method: str, status: int, seconds: float) -> None:
        """Count one request (its path and method reduced to known names or ``other``)."""
        route = path if path in ROUTES else "other"
        self.requests.labels(route, method if method in HTTP_METHODS else "other", str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def text(self) -> bytes:
        """The registry in the Prometheus text format (computes the drift: call it off the event loop)."""
        return generate_latest(self.registry)


class MonitorCollector(Collector):
    """Reads the monitor and the OOD tally at each scrape (see the module docstring for the metrics)."""

    def __init__(self, monitor: Any, ood: OODTally) -> None:
        self.monitor = monitor
        self.ood = ood

    def collect(self) -> Iterator[Any]:
        """The metrics computed from the monitor's current window."""
        summary = self.monitor.summary()
        counts = self.ood.counts()
        yield _counter("workbench_answers", "Answers computed since start", summary["answers"])
        yield _counter("workbench_ood_checked", "Answers checked for being out of distribution", counts["checked"])
        yield _counter("workbench_ood_flagged", "Answers flagged out of distribution", counts["flagged"])
        means = summary["means"]
        for name, key, meaning in (
            ("workbench_retrieval_rate", "retrieval", "Share of deciding answers with P(correct) < tau"),
            ("workbench_p_correct_mean", "p_correct", "Mean calibrated P(correct) of deciding answers"),
            ("workbench_ood_rate", "ood", "Share of checked answers flagged out of distribution"),
        ):
            gauge = GaugeMetricFamily(name, f"{meaning}, over the rolling window")
            if means.get(key) is not None:
                gauge.add_metric([], means[key])
            yield gauge
        yield GaugeMetricFamily(
            "workbench_drift_reference", "1 when the bundle carries reference distributions", value=summary["reference"]
        )
        families = {
            "window_answers": ("workbench_window_answers", "Values of the series in the rolling window"),
            "psi": ("workbench_drift_psi", "PSI of the rolling window against the bundle's reference"),
            "threshold": ("workbench_drift_psi_threshold", "PSI above which the series alarms"),
            "ks": ("workbench_drift_ks", "Kolmogorov-Smirnov distance of the window to the reference"),
            "alarm": ("workbench_drift_alarm", "1 when the series alarms (PSI over its threshold, enough values)"),
            "reference_mean": ("workbench_reference_mean", "Mean of the series in the bundle's reference"),
        }
        gauges = {key: GaugeMetricFamily(name, text, labels=["series"]) for key, (name, text) in families.items()}
        for name, row in summary["series"].items():
            values = {**row, "window_answers": row["count"], "alarm": float(row["alarm"])}
            for key, gauge in gauges.items():
                if values.get(key) is not None:
                    gauge.add_metric([name], float(values[key]))
        yield from gauges.values()


def _counter(name: str, text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, text, value=value)


class RequestMetrics:
    """ASGI middleware: each HTTP request's route, method, status and seconds into :class:`ServeMetrics` (a request
    whose client left before a response counts as 499)."""

    def __init__(self, app: ASGIApp, metrics: ServeMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [499]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            seconds = time.perf_counter() - started
            self.metrics.observe(str(scope.get("path", "")), str(scope.get("method", "")), status[0], seconds)


def add_monitor_routes(app: FastAPI, monitor: Any, metrics: ServeMetrics) -> None:
    """Add ``GET /metrics`` and ``GET /drift`` to ``app`` (see the module docstring)."""

    @app.get("/metrics", summary="Prometheus metrics: requests, latency, retrieval rate, P(correct), OOD, drift")
    async def prometheus_metrics() -> Response:
        body = await anyio.to_thread.run_sync(metrics.text)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    @app.get("/drift", summary="Drift of the rolling window against the bundle's reference, per series")
    async def drift() -> JSONResponse:
        summary = await anyio.to_thread.run_sync(monitor.summary)
        return JSONResponse(json_safe(summary))
