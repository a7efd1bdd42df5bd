"""Stage ``report_nli``: the NLI judges' accuracy table and the cross-encoder's training record, as Markdown + PNG."""

from __future__ import annotations

import json
from typing import Any

from workbench.core.atomic import atomic_directory
from workbench.stages.context import StageContext
from workbench.stages.nli_eval import best_judge, judge_table_lines


def run(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` and ``judges.png`` to the report directory."""
    from workbench.plots import grouped_bars

    record = json.loads((ctx.inputs["eval_nli"] / "judges.json").read_text())
    training, table = record["training"], record["judges"]
    measured = {k: v for k, v in table.items() if "skipped" not in v}
    best = best_judge(table)
    report_dir = ctx.config.resolved_report_dir
    with atomic_directory(report_dir) as tmp:
        grouped_bars(
            tmp / "judges.png",
            list(measured),
            {
                "held-out NLI pairs": [v["nli_pairs"]["accuracy"] for v in measured.values()],
                "short answers": [v["short_answers"]["accuracy"] for v in measured.values()],
            },
            title="NLI judges: accuracy",
            ylabel="accuracy",
        )
        recall = training["val_recall"]
        lines = [
            f"# {ctx.config.name} report",
            "",
            f"Regenerate with `{ctx.rerun}`.",
            "",
            "## The cross-encoder",
            "",
            f"MiniLM (all-MiniLM-L6-v2) with a new 3-way head, trained on {training['train_pairs']} pairs built from "
            f"the Wikipedia summaries (entailment: a summary and one of its sentences; contradiction: that sentence "
            f"with a year, number or name swapped; neutral: a sentence of another article of the same topic), "
            f"{training['epochs']} epoch(s), lr {training['lr']}, {training['threads']} thread(s): "
            f"**{training['train_seconds']:.0f} s**. Held-out validation ({training['val_pairs']} pairs, articles "
            f"never seen in training): accuracy **{training['val_accuracy']:.3f}**, recall contradiction "
            f"{recall.get('contradiction', float('nan')):.2f} / neutral {recall.get('neutral', float('nan')):.2f} / "
            f"entailment {recall.get('entailment', float('nan')):.2f}.",
            "",
            "## Every judge on the same pairs",
            "",
            *judge_table_lines(table),
            "",
            "![judge accuracy](judges.png)",
            "",
            f"Best judge for short answers (what the uncertainty features compare): **{best}**. That is the "
            "embedded default (`nli.kind`) of every recipe; the cross-encoder is for sentence-level premises.",
            "",
        ]
        (tmp / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return {"report": str(report_dir / "report.md"), "best_short_answer_judge": best}
