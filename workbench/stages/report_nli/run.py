"""Stage ``report_nli``: the NLI judges' accuracy table and the cross-encoder's training record, as Markdown + PNG
(written by :func:`workbench.stages.report_nli.report.write_nli_report`)."""

from __future__ import annotations

import json
from typing import Any

from workbench.core.atomic import atomic_directory
from workbench.stages.context import StageContext
from workbench.stages.nli_eval import best_judge
from workbench.stages.report_nli.report import write_nli_report


def run(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` and ``judges.png`` to the report directory from ``eval_nli``'s ``judges.json``; return
    the report path and the best judge for short answers."""
    record = json.loads((ctx.inputs["eval_nli"] / "judges.json").read_text())
    best = best_judge(record["judges"])
    report_dir = ctx.config.resolved_report_dir
    with atomic_directory(report_dir) as tmp:
        write_nli_report(record, best, tmp, name=ctx.config.name, rerun=ctx.rerun)
    return {"report": str(report_dir / "report.md"), "best_short_answer_judge": best}
