"""Report sections of the controller distillation: the ``distill_data`` stage's trace dataset.

:func:`distill_data_lines` reads a ``distill_data`` output's ``summary.json`` and returns Markdown lines (the report
stage places them); it also draws ``distill_data_rows.png`` (rows per decision and source) into the report folder.
"""

from __future__ import annotations

import json
import json as _json
from pathlib import Path
from typing import Any

from workbench.core.formatting import counted, fmt, markdown_table
from workbench.core.formatting import fmt as _fmt
from workbench.core.formatting import markdown_table as _table
from workbench.distill.traces import DECISIONS
from workbench.distill.traces import DECISIONS as _DECISIONS
from workbench.distill.traces import SOURCES as _SOURCES
from workbench.distill.traces import TRACE_SPLITS as _SPLITS
from workbench.plots import grouped_bars, loss_curve

__all__ = ["distill_data_lines", "distill_lines"]


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


# ------------------------------------------------------------------------------------------------------ distill
def distill_lines(stage_dir: Path, out_dir: Path) -> list[str]:
    """Markdown lines of the ``distill`` section from the stage output ``stage_dir`` (``summary.json`` and
    ``heldout.json``): the training record and ``distill_loss.png`` (drawn into ``out_dir``), the held-out agreement
    of base and student with the teacher's and the gold rows per decision, parse failures of the generative
    decisions, and controller latency and tokens per decision."""

    stage_dir, out_dir = Path(stage_dir), Path(out_dir)
    summary = _json.loads((stage_dir / "summary.json").read_text(encoding="utf-8"))
    heldout = _json.loads((stage_dir / "heldout.json").read_text(encoding="utf-8"))
    curve = summary.get("loss_curve") or []
    if curve:
        loss_curve(
            out_dir / "distill_loss.png",
            curve,
            title=f"distill: training loss, {summary.get('base_model')} + LoRA",
            resumed_from=summary.get("resumed_from_step"),
        )
    training, lora = summary.get("training", {}), summary.get("lora", {})
    decisions = [d for d in DECISIONS if d in heldout.get("student", {})]
    rows_trained = summary.get("rows_by_decision", {})
    resumed = summary.get("resumed_from_step")
    lines = [
        "## Distilled controller",
        "",
        f"Student: `{summary.get('base_model')}` + LoRA (r {lora.get('r')}, alpha {lora.get('alpha')}, dropout "
        f"{lora.get('dropout')}, on {', '.join(lora.get('target_modules', []))}; "
        f"{lora.get('trainable_parameters')} trainable parameters), trained on {summary.get('rows_trained')} rows "
        f"({', '.join(summary.get('sources', []))}; {summary.get('tokens')} tokens, "
        f"{summary.get('truncated_rows')} truncated) for {training.get('epochs')} epoch(s): "
        f"{summary.get('steps')} optimizer steps, lr {training.get('learning_rate')}, batch "
        f"{training.get('batch_size')} x {training.get('grad_accum')} accumulation, precision "
        f"{training.get('precision')}, strategy {training.get('strategy')} on {summary.get('world_size')} "
        f"{summary.get('accelerator')} process(es), seed {training.get('seed')}: {_fmt(summary.get('seconds'), 0)} s"
        + (f" (resumed from the step-{resumed} checkpoint)" if resumed else "")
        + ". Mean loss per epoch: "
        + (" → ".join(_fmt(v) for v in summary.get("epoch_losses", [])) or "–")
        + ".",
        "",
    ]
    if curve:
        lines += ["![training loss](distill_loss.png)", ""]
    lines += [
        "Held-out rows, read as InSemRAG reads its controller (next-token log-probs for the single-token decisions, "
        "greedy replies through the controller's parsers otherwise). `base` is the base model prompted as the "
        "controller before training. Single-token decisions: accuracy (F1) against the teacher's and the gold "
        "labels; generative decisions: token F1 of the reply to the teacher's.",
        "",
    ]
    body = []
    for d in decisions:
        base, student = heldout["base"][d], heldout["student"][d]
        counts = heldout.get("rows", {}).get(d, {})
        cells = [d, str(rows_trained.get(d, 0)), f"{counts.get('teacher', 0)} / {counts.get('gold', 0)}"]
        for source in ("teacher", "gold"):
            for model in (base, student):
                figures = model.get(source, {})
                if model["kind"] == "single_token":
                    cells.append(
                        f"{_fmt(figures.get('accuracy'))} ({_fmt(figures.get('f1'), 2)})" if figures.get("n") else "–"
                    )
                else:
                    cells.append(_fmt(figures.get("token_f1")) if figures.get("n") else "–")
        body.append(cells)
    header = [
        "decision",
        "rows trained",
        "held-out teacher / gold",
        "teacher: base",
        "teacher: student",
        "gold: base",
        "gold: student",
    ]
    lines += [*_table(header, body), ""]
    parse = [
        [
            d,
            _fmt(heldout["base"][d]["parse_failure_rate"], 1, style="%"),
            _fmt(heldout["student"][d]["parse_failure_rate"], 1, style="%"),
        ]
        for d in decisions
    ]
    lines += [
        "Unusable replies (the controller fell back: unparsable generations, unreadable verdicts):",
        "",
        *_table(["decision", "base", "student"], parse),
        "",
        "Controller cost per decision on the held-out rows (generative replies decoded in batches):",
        "",
    ]
    cost = []
    for d in decisions:
        base, student = heldout["base"][d], heldout["student"][d]
        cost.append(
            [
                d,
                _fmt(base["seconds_per_decision"], 3),
                _fmt(student["seconds_per_decision"], 3),
                _fmt(base["tokens_per_decision"], 0),
                _fmt(student["tokens_per_decision"], 0),
                _fmt(base["generated_tokens_per_decision"], 1),
                _fmt(student["generated_tokens_per_decision"], 1),
            ]
        )
    lines += [
        *_table(
            [
                "decision",
                "seconds: base",
                "seconds: student",
                "tokens: base",
                "tokens: student",
                "generated: base",
                "generated: student",
            ],
            cost,
        ),
        "",
    ]
    return lines
