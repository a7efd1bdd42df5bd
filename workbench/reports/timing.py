"""The time table that ends the run report: each finished stage's seconds (read from the run's stage markers and
manifest) and the whole pipeline against the recipe's budget."""

from __future__ import annotations

import json
from pathlib import Path


def stage_times(run_dir: Path, stages: list[str]) -> list[tuple[str, float, bool]]:
    """``(stage, seconds when last computed, whether this invocation computed it)`` for each finished stage of
    ``stages`` in ``run_dir`` (a stage without a ``_stage.json`` marker is left out)."""
    manifest_path = run_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"stages": {}}
    rows = []
    for name in stages:
        marker = run_dir / "stages" / name / "_stage.json"
        if not marker.exists():
            continue
        summary = json.loads(marker.read_text()).get("summary", {})
        cached = manifest["stages"].get(name, {}).get("cached", False)
        rows.append((name, float(summary.get("seconds", 0.0)), not cached))
    return rows


def budget_note(seconds: float, budget: float | None) -> str:
    """`` (budget N s on 2 cores: within|OVER)`` when ``budget`` (``report.budget_seconds``) is set, else empty."""
    if budget is None:
        return ""
    return f" (budget {budget} s on 2 cores: {'within' if seconds <= budget else 'OVER'})"


def time_lines(
    times: list[tuple[str, float, bool]], pipeline_seconds: float, invocation_seconds: float, budget: float | None
) -> list[str]:
    """The report's "Time" section: one row per entry of ``times`` (see :func:`stage_times`), then the whole
    pipeline's seconds (with :func:`budget_note`) and this invocation's."""
    return [
        "## Time",
        "",
        "| stage | seconds (when last computed) | computed in this invocation |",
        "|---|---:|---|",
        *[f"| {name} | {seconds:.1f} | {'yes' if fresh else 'no (cached)'} |" for name, seconds, fresh in times],
        "",
        f"Whole pipeline from scratch: **{pipeline_seconds:.0f} s**{budget_note(pipeline_seconds, budget)}; "
        f"this invocation so far: {invocation_seconds:.0f} s. A one-time model conversion (~35 s) happens outside "
        "the stages on a fresh machine.",
        "",
    ]
