"""Report section for the ``distill_data`` stage: the controller distillation's trace dataset.

:func:`distill_data_lines` reads a ``distill_data`` output's ``summary.json`` and returns Markdown lines (the report
stage places them); it also draws ``distill_data_rows.png`` (rows per decision and source) into the report folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.core.formatting import counted, fmt, markdown_table
from workbench.distill.traces import DECISIONS as _DECISIONS
from workbench.distill.traces import SOURCES as _SOURCES
from workbench.distill.traces import TRACE_SPLITS as _SPLITS
from workbench.plots import grouped_bars
from workbench.reports.section import Section, SectionInput


def _teacher_line(summary: dict[str, Any]) -> str:
    teacher = summary.get("teacher")
    sources = ", ".join(summary.get("sources", []))
    if not teacher:
        return f"Sources: {sources}; no teacher (gold-derived labels only)."
    fingerprint = teacher.get("fingerprint") or ""
    same = " (the answering model)" if teacher.get("is_answering_model") else ""
    return (
        f"Sources: {sources}. Teacher: `{teacher.get('spec')}`{same}, fingerprint `{fingerprint[:12]}`, scoring "
        f"by {teacher.get('score_mode')}; every decision rendered with the prompted controller's own prompts."
    )


def _rows_table(splits: dict[str, Any]) -> list[str]:
    header = ["decision", *(f"{source} ({split})" for split in _SPLITS for source in _SOURCES)]
    body, totals = [], [0] * (len(header) - 1)
    for decision in _DECISIONS:
        cells = [
            splits.get(s, {}).get("by_decision", {}).get(decision, {}).get(src, 0) for s in _SPLITS for src in _SOURCES
        ]
        totals = [a + b for a, b in zip(totals, cells, strict=True)]
        body.append([decision, *(str(c) for c in cells)])
    body.append(["**total**", *(f"**{t}**" for t in totals)])
    return markdown_table(header, body)


def _skipped_table(splits: dict[str, Any]) -> list[str]:
    body = []
    for decision in _DECISIONS:
        made = sum(splits.get(s, {}).get("teacher_replies", {}).get(decision, 0) for s in _SPLITS)
        skipped = sum(splits.get(s, {}).get("skipped", {}).get(decision, 0) for s in _SPLITS)
        if made:
            body.append([decision, str(made), str(skipped), fmt(skipped / made, 1, style="%")])
    made = sum(sum(splits.get(s, {}).get("teacher_replies", {}).values()) for s in _SPLITS)
    skipped = sum(sum(splits.get(s, {}).get("skipped", {}).values()) for s in _SPLITS)
    if not made:
        return ["No teacher replies were recorded (the teacher is not a source)."]
    body.append(["**all**", f"**{made}**", f"**{skipped}**", f"**{fmt(skipped / made, 1, style='%')}**"])
    return markdown_table(["decision", "teacher replies", "unusable (skipped)", "share"], body)


def _balance_table(splits: dict[str, Any]) -> list[str]:
    body = []
    for decision in _DECISIONS:
        for source in _SOURCES:
            for split in _SPLITS:
                counts = splits.get(split, {}).get("labels", {}).get(decision, {}).get(source) or {}
                total = sum(counts.values())
                if not total:
                    continue
                shown = " / ".join(f"{label} {n}" for label, n in sorted(counts.items()))
                if decision == "channel_weights":  # three letters: how dominant the commonest one is
                    share = f"majority {fmt(max(counts.values()) / total, 2)}"
                else:
                    share = f"Yes {fmt(counts.get('Yes', 0) / total, 2)}"
                body.append([decision, source, split, shown, share])
    if not body:
        return ["No single-token rows."]
    return markdown_table(["decision", "source", "split", "labels", "share"], body, align="lllll")


def _cost_table(summary: dict[str, Any]) -> list[str]:
    per_question = summary.get("teacher_cost_per_question") or {}
    body = [
        [
            decision,
            fmt(cost.get("lm_calls"), 1),
            fmt(cost.get("prompt_tokens"), 0),
            fmt(cost.get("generated_tokens"), 1),
            fmt(cost.get("seconds"), 2),
        ]
        for decision, cost in per_question.items()
        if cost.get("prompts")
    ]
    if not body:
        return []
    return markdown_table(
        ["decision", "LM calls / q", "prompt tokens / q", "generated tokens / q", "seconds / q"], body
    )


def distill_data_lines(stage_dir: Path, out_dir: Path) -> list[str]:
    """Markdown lines of the ``distill_data`` section from the stage output ``stage_dir``: the teacher, rows per
    decision and source in each split, the unusable teacher replies skipped per decision, the label balance of the
    single-token decisions and the teacher's cost per question; draws ``distill_data_rows.png`` into ``out_dir``."""

    summary = json.loads((Path(stage_dir) / "summary.json").read_text())
    splits = summary.get("splits", {})
    sizes = ", ".join(
        f"{split}: {splits[split]['rows']} rows from {counted(splits[split]['questions'], 'question')} of "
        f"`{splits[split]['from']}`"
        for split in _SPLITS
        if split in splits
    )
    train = splits.get("train", {}).get("by_decision", {})
    grouped_bars(
        Path(out_dir) / "distill_data_rows.png",
        list(_DECISIONS),
        {source: [float(train.get(d, {}).get(source, 0)) for d in _DECISIONS] for source in _SOURCES},
        title="distill_data: training rows per decision",
        ylabel="rows",
        ylim=None,
        rotate=30,
    )
    lines = [
        "## Controller distillation data",
        "",
        _teacher_line(summary),
        f"One row per controller decision ({sizes}); seed {summary.get('seed')}, {fmt(summary.get('seconds'), 0)} s.",
        "",
        "Rows per decision and source:",
        "",
        *_rows_table(splits),
        "",
        "![rows per decision](distill_data_rows.png)",
        "",
        "Teacher replies the controller could not use (its fallbacks; skipped, never trained on):",
        "",
        *_skipped_table(splits),
        "",
        "Label balance of the single-token decisions (Yes / No; the intent letter for channel_weights):",
        "",
        *_balance_table(splits),
        "",
    ]
    cost = _cost_table(summary)
    if cost:
        lines += ["Teacher cost per question (cached generations counted as if run):", "", *cost, ""]
    return lines


def section(view: SectionInput) -> Section:
    """The ``distill_data`` stage's section of the run's report (:func:`distill_data_lines`)."""
    return Section(distill_data_lines(view.stage_dir, view.out_dir))
