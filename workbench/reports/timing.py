"""The time table that ends the run report: each finished stage's seconds and peak resident memory (read from the
run's stage markers and manifest) and the whole pipeline against the recipe's budget."""

from __future__ import annotations

import json
from pathlib import Path


def stage_times(run_dir: Path, stages: list[str]) -> list[tuple[str, float, bool, float | None]]:
    """``(stage, seconds when last computed, whether this invocation computed it, peak resident MB then or None)``
    for each finished stage of ``stages`` in ``run_dir`` (a stage without a ``_stage.json`` marker is left out; the
    peak is None for a stage computed before the runner recorded it)."""
    manifest_path = run_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"stages": {}}
    rows = []
    for name in stages:
        marker = run_dir / "stages" / name / "_stage.json"
        if not marker.exists():
            continue
        summary = json.loads(marker.read_text()).get("summary", {})
        cached = manifest["stages"].get(name, {}).get("cached", False)
        peak = summary.get("peak_rss_mb")
        rows.append((name, float(summary.get("seconds", 0.0)), not cached, None if peak is None else float(peak)))
    return rows


def budget_note(seconds: float, budget: float | None) -> str:
    """`` (budget N s on 2 cores: within|OVER)`` when ``budget`` (``report.budget_seconds``) is set, else empty."""
    if budget is None:
        return ""
    return f" (budget {budget} s on 2 cores: {'within' if seconds <= budget else 'OVER'})"


def _mb(peak: float | None) -> str:
    return "-" if peak is None else f"{peak:.0f}"


def time_lines(
    times: list[tuple[str, float, bool, float | None]],
    pipeline_seconds: float,
    invocation_seconds: float,
    budget: float | None,
) -> list[str]:
    """The report's "Time" section: one row per entry of ``times`` (see :func:`stage_times`: seconds and peak
    resident memory per stage), then the whole pipeline's seconds (with :func:`budget_note`), this invocation's, and
    the largest stage peak."""
    peaks = [peak for *_, peak in times if peak is not None]
    largest = max(peaks, default=None)
    peak_note = (
        []
        if largest is None
        else [
            f"Largest stage peak of resident memory: **{largest / 1000:.2f} GB** (this process; a stage's own peak "
            "where Linux lets the runner reset it, else the process's peak so far).",
            "",
        ]
    )
    return [
        "## Time",
        "",
        "| stage | seconds (when last computed) | peak RSS (MB) | computed in this invocation |",
        "|---|---:|---:|---|",
        *[
            f"| {name} | {seconds:.1f} | {_mb(peak)} | {'yes' if fresh else 'no (cached)'} |"
            for name, seconds, fresh, peak in times
        ],
        "",
        f"Whole pipeline from scratch: **{pipeline_seconds:.0f} s**{budget_note(pipeline_seconds, budget)}; "
        f"this invocation so far: {invocation_seconds:.0f} s. A one-time model conversion (~35 s) happens outside "
        "the stages on a fresh machine.",
        "",
        *peak_note,
    ]
