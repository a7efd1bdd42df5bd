"""Stage ``report_bench``: the backends benchmark as Markdown tables and a PNG (written by
:func:`workbench.reports.backends.write_backends_report`)."""

from __future__ import annotations

import json
from typing import Any

from workbench.core.atomic import atomic_directory
from workbench.reports.backends import write_backends_report
from workbench.stages.context import StageContext


def run(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` and ``speedup.png`` to the report directory from ``bench_backends``' ``bench.json``."""
    bench = json.loads((ctx.inputs["bench_backends"] / "bench.json").read_text())
    report_dir = ctx.config.resolved_report_dir
    with atomic_directory(report_dir) as tmp:
        write_backends_report(bench, tmp, name=ctx.config.name, rerun=ctx.rerun)
    return {"report": str(report_dir / "report.md")}
