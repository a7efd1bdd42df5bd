"""Report section for the ``distill`` stage: the controller student's training record and loss curve, its held-out
agreement with the teacher's and the gold rows per decision against the base model's, parse failures of the
generative decisions, and controller latency and tokens per decision."""

from __future__ import annotations

import json
from pathlib import Path

from workbench.core.formatting import fmt, markdown_table
from workbench.distill.traces import DECISIONS
from workbench.reports.section import Section, SectionInput
from workbench.reports.training import lora_loss_plot


def distill_lines(stage_dir: Path, out_dir: Path) -> list[str]:
    """Markdown lines of the ``distill`` section from the stage output ``stage_dir`` (``summary.json`` and
    ``heldout.json``): the training record and ``distill_loss.png`` (drawn into ``out_dir``), the held-out agreement
    of base and student with the teacher's and the gold rows per decision, parse failures of the generative
    decisions, and controller latency and tokens per decision."""

    stage_dir, out_dir = Path(stage_dir), Path(out_dir)
    summary = json.loads((stage_dir / "summary.json").read_text(encoding="utf-8"))
    heldout = json.loads((stage_dir / "heldout.json").read_text(encoding="utf-8"))
    curve = lora_loss_plot(summary, out_dir / "distill_loss.png", "distill")
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
        f"{summary.get('accelerator')} process(es), seed {training.get('seed')}: {fmt(summary.get('seconds'), 0)} s"
        + (f" (resumed from the step-{resumed} checkpoint)" if resumed else "")
        + ". Mean loss per epoch: "
        + (" → ".join(fmt(v) for v in summary.get("epoch_losses", [])) or "–")
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
                        f"{fmt(figures.get('accuracy'))} ({fmt(figures.get('f1'), 2)})" if figures.get("n") else "–"
                    )
                else:
                    cells.append(fmt(figures.get("token_f1")) if figures.get("n") else "–")
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
    lines += [*markdown_table(header, body), ""]
    parse = [
        [
            d,
            fmt(heldout["base"][d]["parse_failure_rate"], 1, style="%"),
            fmt(heldout["student"][d]["parse_failure_rate"], 1, style="%"),
        ]
        for d in decisions
    ]
    lines += [
        "Unusable replies (the controller fell back: unparsable generations, unreadable verdicts):",
        "",
        *markdown_table(["decision", "base", "student"], parse),
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
                fmt(base["seconds_per_decision"], 3),
                fmt(student["seconds_per_decision"], 3),
                fmt(base["tokens_per_decision"], 0),
                fmt(student["tokens_per_decision"], 0),
                fmt(base["generated_tokens_per_decision"], 1),
                fmt(student["generated_tokens_per_decision"], 1),
            ]
        )
    lines += [
        *markdown_table(
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


def section(view: SectionInput) -> Section:
    """The ``distill`` stage's section of the run's report (:func:`distill_lines`)."""
    return Section(distill_lines(view.stage_dir, view.out_dir))
