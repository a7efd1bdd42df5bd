"""Every benchmark's report stage: read the measuring stage's ``bench.json`` and let the benchmark's writer fill the
report directory, which replaces the old one only once it is complete."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.core.atomic import atomic_directory
from workbench.stages.context import StageContext


def write_bench_report(
    ctx: StageContext, stage: str, write: Callable[[dict[str, Any], Path], Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read ``stage``'s ``bench.json`` and let ``write(bench, directory)`` fill the report directory, which replaces
    the old one only once it is complete; return the summary naming ``report.md``, and the benchmark read."""
    bench = json.loads((ctx.inputs[stage] / "bench.json").read_text())
    report_dir = ctx.config.resolved_report_dir
    with atomic_directory(report_dir) as tmp:
        write(bench, tmp)
    return {"report": str(report_dir / "report.md")}, bench
