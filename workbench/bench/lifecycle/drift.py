"""Drift alarms measured on real streams: scored answers streamed one request at a time through the rolling window
``serve`` keeps (:class:`~workbench.monitoring.window.RollingMonitor`, the code behind ``/drift`` and ``/metrics``)
against the bundle's reference.

* **in distribution** — the deployment traffic alone: after each request once a series has ``min_count`` answers,
  does it alarm? Every alarm here is a false alarm; the share of requests with one is reported;
* **on a shift** — the deployment traffic, then the shifted stream: how many shifted requests until the alarm fires
  (any series, and per series), with the window still holding the traffic before the shift (as a server's would).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from workbench.monitoring.reference import DriftReference
from workbench.monitoring.window import RollingMonitor


def with_window(reference: DriftReference, window: int | None, min_count: int | None) -> DriftReference:
    """``reference`` whose settings hold ``window`` and ``min_count`` answers (None: the bundle's own)."""
    settings = reference.settings
    size = window or settings.window
    count = min(min_count or settings.min_count, size)
    return dataclasses.replace(reference, settings=dataclasses.replace(settings, window=size, min_count=count))


def log_records(
    rows: Sequence[dict[str, Any]], features: Sequence[str], tau: float, ood: Sequence[bool | None]
) -> list[dict[str, Any]]:
    """The answer-log records (:mod:`workbench.monitoring.answer_log`) of scored rows (``scores.jsonl`` of
    ``workbench score`` with a bundle): P(correct), τ, the decision features and the runtime's OOD flag of each
    question (``ood``); one second apart."""
    return [
        {
            "time": float(i),
            "p_correct": row["p_correct"],
            "tau": tau,
            "features": {name: row["features"].get(name) for name in features},
            "ood": flag,
        }
        for i, (row, flag) in enumerate(zip(rows, ood, strict=True))
    ]


def stream(reference: DriftReference, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each request's drift after it joined the rolling window: ``{series: {status, psi, threshold}}`` per request."""
    monitor = RollingMonitor(reference, "lifecycle", "stream")
    out = []
    for record in records:
        monitor.add_records([record])
        summary = monitor.summary()
        out.append({name: {k: s[k] for k in ("status", "psi", "threshold")} for name, s in summary["series"].items()})
    return out


def false_alarms(steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Of the requests after which some series could alarm (enough answers), how many alarmed, overall and per
    series."""
    judged = [s for s in steps if any(v["status"] != "too_few" for v in s.values())]
    series = {
        name: {
            "judged": sum(1 for s in steps if s[name]["status"] != "too_few"),
            "alarms": sum(1 for s in steps if s[name]["status"] == "alarm"),
        }
        for name in (steps[0] if steps else {})
    }
    alarms = sum(1 for s in judged if any(v["status"] == "alarm" for v in s.values()))
    return {"requests": len(steps), "judged": len(judged), "alarms": alarms, "series": series}


def requests_to_alarm(steps: Sequence[dict[str, Any]], start: int) -> dict[str, Any]:
    """How many requests after the first ``start`` (the traffic before the shift) the alarm took: overall (any
    series) and per series; None where it never fired. ``shifted``: the requests of the shift; ``alarming_before``:
    the series already alarming after the last request before the shift (their count says nothing of the shift)."""
    shifted = steps[start:]

    def first(name: str | None) -> int | None:
        for i, step in enumerate(shifted, 1):
            names = step if name is None else (name,)
            if any(step[n]["status"] == "alarm" for n in names):
                return i
        return None

    names = list(shifted[0]) if shifted else []
    before = steps[start - 1] if 0 < start <= len(steps) else {}
    return {
        "shifted": len(shifted),
        "any": first(None),
        "series": {name: first(name) for name in names},
        "alarming_before": sorted(name for name, row in before.items() if row["status"] == "alarm"),
    }


def alarm_ratio_trace(steps: Sequence[dict[str, Any]]) -> dict[str, list[float | None]]:
    """Each series' PSI over the threshold it alarms above (max of ``psi_alarm`` and its sampling bound) after every
    request, None while it has too few answers: the drift-over-time plot's lines (a series alarms above 1)."""
    names = list(steps[0]) if steps else []
    return {
        name: [s[name]["psi"] / s[name]["threshold"] if s[name]["status"] != "too_few" else None for s in steps]
        for name in names
        if any(s[name]["status"] != "too_few" for s in steps)
    }
