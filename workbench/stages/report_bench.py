"""Stage ``report_bench``: the backends benchmark as Markdown tables and a PNG (written by
:func:`workbench.reports.backends.write_backends_report`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from workbench.core.atomic import atomic_directory
from workbench.reports.backends import write_backends_report
from workbench.stages.context import StageContext


def write_bench_report(ctx: StageContext, stage: str, write: Callable[..., Any]) -> dict[str, Any]:
    """Read ``stage``'s ``bench.json`` and let ``write(bench, directory, name=, rerun=)`` fill the report directory,
    which replaces the old one only once it is complete; return the summary naming ``report.md``."""
    bench = json.loads((ctx.inputs[stage] / "bench.json").read_text())
    report_dir = ctx.config.resolved_report_dir
    with atomic_directory(report_dir) as tmp:
        write(bench, tmp, name=ctx.config.name, rerun=ctx.rerun)
    return {"report": str(report_dir / "report.md")}


def run(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` and ``speedup.png`` to the report directory from ``bench_backends``' ``bench.json``."""
    return write_bench_report(ctx, "bench_backends", write_backends_report)
