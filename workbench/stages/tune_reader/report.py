"""Report section of the ``tune_reader`` stage: how the reader adapter was trained, and base vs tuned model per answer
mode and question template on the held-out split.

:func:`reader_lines` reads the stage output's ``summary.json`` and ``heldout.json`` and returns Markdown lines; it
draws ``reader_loss.png`` (the training loss) and ``reader_accuracy.png`` (accuracy per mode, base vs tuned) into the
report folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.core.formatting import fmt, markdown_table
from workbench.plots import grouped_bars
from workbench.reports.modes import MODE_TITLES
from workbench.reports.section import Section, SectionInput
from workbench.reports.training import lora_loss_plot


def _training_line(summary: dict[str, Any]) -> str:
    training, lora = summary.get("training", {}), summary.get("lora", {})
    by_template = ", ".join(f"{t} {n}" for t, n in summary.get("questions_by_template", {}).items())
    by_mode = ", ".join(f"{MODE_TITLES.get(m, m)} {n}" for m, n in summary.get("rows_by_mode", {}).items())
    retrieval = summary.get("retrieval", {})
    resumed = summary.get("resumed_from_step")
    return (
        f"Base: `{summary.get('base_model')}` + LoRA (r {lora.get('r')}, alpha {lora.get('alpha')}, dropout "
        f"{lora.get('dropout')}, on {', '.join(lora.get('target_modules', []))}; "
        f"{lora.get('trainable_parameters')} trainable parameters). Trained on {summary.get('questions')} "
        f"`{summary.get('split')}` questions ({by_template}), each in every mode: {summary.get('rows_trained')} rows "
        f"({by_mode}; RAG rows with {retrieval.get('retriever')} top-{retrieval.get('k')}, passages cut to "
        f"{summary.get('passage_chars')} characters; {summary.get('tokens')} tokens, {summary.get('truncated_rows')} "
        f"truncated), target = the gold answer (the gold option of an either-or question) + EOS. "
        f"{summary.get('steps')} optimizer steps ({training.get('epochs')} epoch(s), batch "
        f"{training.get('batch_size')} x {training.get('grad_accum')}, AdamW lr {training.get('learning_rate')}, "
        f"precision {training.get('precision')}, seed {training.get('seed')}) on {summary.get('accelerator')}: "
        f"{fmt(summary.get('seconds'), 0)} s"
        + (f" (resumed from the step-{resumed} checkpoint)" if resumed else "")
        + "."
    )


def reader_lines(stage_dir: Path, out_dir: Path) -> list[str]:
    """Markdown lines of the reader-adapter section (module doc) from the ``tune_reader`` output ``stage_dir``."""

    stage_dir, out_dir = Path(stage_dir), Path(out_dir)
    summary = json.loads((stage_dir / "summary.json").read_text(encoding="utf-8"))
    lines = ["## Reader adapter", "", _training_line(summary), ""]
    curve = lora_loss_plot(summary, out_dir / "reader_loss.png", "tune_reader")
    if curve:
        first = curve[0]["loss"]
        tail = [p["loss"] for p in curve[-10:]]
        lines += [
            f"Loss (answer tokens): {fmt(first)} at the first step, {fmt(sum(tail) / len(tail))} over the last "
            f"{len(tail)} steps.",
            "",
            "![reader training loss](reader_loss.png)",
            "",
        ]
    heldout_file = stage_dir / "heldout.json"
    if not heldout_file.is_file():
        return [*lines, "No held-out scoring (`tune_reader.eval_split: null`).", ""]
    heldout = json.loads(heldout_file.read_text(encoding="utf-8"))
    base, tuned = heldout["base"], heldout["tuned"]
    modes = [m for m in (*MODE_TITLES, *tuned["modes"]) if m in tuned["modes"] and m in base["modes"]]
    modes = list(dict.fromkeys(modes))
    grouped_bars(
        out_dir / "reader_accuracy.png",
        [MODE_TITLES.get(m, m) for m in modes],
        {
            "base": [base["modes"][m]["contains"] for m in modes],
            "tuned": [tuned["modes"][m]["contains"] for m in modes],
        },
        title=f"accuracy on {heldout['questions']} {heldout['split']} questions: base vs reader adapter",
        ylabel="accuracy",
    )
    lines += [
        f"Base and tuned model answer the first questions of each template of the `{heldout['split']}` split (not "
        "trained on) in every mode, through the answer stage's code: greedy, an either-or answer right when it names "
        "the gold option only. *Format ok*: the answer names exactly one option.",
        "",
        "![accuracy base vs tuned](reader_accuracy.png)",
        "",
    ]
    header = ["template", "questions"]
    for m in modes:
        header += [f"{MODE_TITLES.get(m, m)}: base", f"{MODE_TITLES.get(m, m)}: tuned"]
    header += ["format ok: base", "format ok: tuned"]
    body = []
    templates = sorted({t for per_mode in tuned["by_template"].values() for t in per_mode})
    for template in [*templates, None]:
        cells = [template or "**all**"]
        if template is None:
            cells.append(str(tuned["modes"][modes[0]]["n"]))
        else:
            cells.append(str(tuned["by_template"][modes[0]].get(template, {}).get("n", 0)))
        for m in modes:
            for model in (base, tuned):
                figures = model["modes"][m] if template is None else model["by_template"][m].get(template, {})
                cells.append(fmt(figures.get("contains")))
        for model in (base, tuned):
            ok = [
                (r.get("format_ok"), r.get("n", 0))
                for m in modes
                for t, r in model["by_template"][m].items()
                if template is None or t == template
            ]
            total = sum(n for _, n in ok)
            cells.append(fmt(sum(v * n for v, n in ok if v is not None) / total) if total else "–")
        body.append(cells)
    lines += [*markdown_table(header, body), ""]
    lines += [
        "Use it: `generator.model=<this run's directory>/stages/tune_reader` in any recipe, or copy "
        "`adapter.json` + `adapter.safetensors` into "
        "`workbench/embedded/smollm2-reader/` to make it the embedded `smollm2-reader` (docs/task.md).",
        "",
    ]
    return lines


def section(view: SectionInput) -> Section:
    """The ``tune_reader`` stage's section of the run's report (:func:`reader_lines`)."""
    return Section(reader_lines(view.stage_dir, view.out_dir))
