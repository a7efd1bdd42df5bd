"""Stage ``report``: a Markdown report with PNG plots, written to ``report.dir`` (e.g. ``reports/quickstart/``).

It reads the ``answer`` stage's ``summary.json`` and ``examples.json`` and the run's stage markers (for timing), so
it is cheap and always re-run. The report directory is replaced atomically.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from pathlib import Path
from typing import Any

from workbench.core.atomic import atomic_directory
from workbench.core.formatting import fmt
from workbench.stages.context import StageContext

MODE_TITLES = {"closed_book": "closed-book", "rag": "RAG", "gold": "gold passage"}


def _stage_times(run_dir: Path, stages: list[str]) -> list[tuple[str, float, bool]]:
    """(stage, seconds when last computed, whether it was computed by this invocation) for finished stages."""
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


def quality_table(summary: dict[str, Any]) -> list[str]:
    """Markdown rows: one per answering mode, with quality, retrieval recall and cost per question."""
    lines = [
        "| mode | questions | EM | token F1 | containment | gold passage in top-k | prompt tokens / q "
        "| answer tokens / q | seconds / q |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, row in summary["modes"].items():
        lines.append(
            f"| {MODE_TITLES.get(mode, mode)} | {row['n']} | {fmt(row['em'])} | {fmt(row['f1'])} "
            f"| {fmt(row['contains'])} | {fmt(row.get('recall_at_k'))} | {fmt(row['prompt_tokens'], 1)} "
            f"| {fmt(row['new_tokens'], 1)} | {fmt(row['seconds_per_question'], 2)} |"
        )
    return lines


def template_table(summary: dict[str, Any]) -> list[str]:
    """Markdown rows per question template: accuracy (containment, or the chosen option) and answer-format
    compliance per mode, the lift retrieval gives over closed-book, where the gold option sits, and the
    closed-book accuracy per difficulty band (either-or templates)."""
    by = summary["by_template"]
    modes = list(by)
    templates = sorted({t for per_mode in by.values() for t in per_mode})
    lift = "rag" in by and "closed_book" in by
    header = ["template", "questions"]
    header += [f"{MODE_TITLES.get(m, m)} accuracy" for m in modes]
    header += [f"{MODE_TITLES.get(m, m)} format ok" for m in modes]
    header += ["RAG − closed-book"] * lift + ["gold option first", "closed-book by difficulty"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for template in templates:
        rows = {m: by[m].get(template, {}) for m in modes}
        cells = [template, str(max(r.get("n", 0) for r in rows.values()))]
        cells += [fmt(rows[m].get("contains")) for m in modes]
        cells += [fmt(rows[m].get("format_ok")) for m in modes]
        if lift:
            gap = (
                None
                if not rows["rag"] or not rows["closed_book"]
                else rows["rag"]["contains"] - rows["closed_book"]["contains"]
            )
            cells.append(fmt(gap) if gap is None else f"{gap:+.3f}")
        first = next(iter(rows.values()))
        cells.append(fmt(first.get("gold_first")))
        bands = rows.get("closed_book", first).get("by_difficulty") or {}
        cells.append(", ".join(f"{d} {fmt(v, 2)}" for d, v in bands.items()) or "–")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def example_table(examples: list[dict[str, Any]], limit: int = 6) -> list[str]:
    """Markdown rows: a few questions with the gold answer and each mode's prediction."""
    if not examples:
        return []
    modes = [m for m in MODE_TITLES if f"pred_{m}" in examples[0]]
    lines = [
        "| question | gold | " + " | ".join(MODE_TITLES[m] for m in modes) + " |",
        "|---|---|" + "---|" * len(modes),
    ]
    for ex in examples[:limit]:
        question = ex["question"].replace("|", "/")
        question = question if len(question) <= 110 else question[:107] + "..."
        preds = [str(ex.get(f"pred_{m}", "")).replace("|", "/") or "(empty)" for m in modes]
        lines.append(f"| {question} | {ex['gold']} | " + " | ".join(preds) + " |")
    return lines


def answer_section(answer_dir: Path, out_dir: Path, config: Any) -> tuple[list[str], list[str]]:
    """``(setting lines, section lines)`` for the ``answer`` stage, with ``quality.png`` written to ``out_dir``."""
    from workbench.plots import grouped_bars

    summary = json.loads((answer_dir / "summary.json").read_text())
    examples = json.loads((answer_dir / "examples.json").read_text())
    modes = list(summary["modes"])
    grouped_bars(
        out_dir / "quality.png",
        ["EM", "token F1", "containment"],
        {MODE_TITLES.get(m, m): [summary["modes"][m][k] for k in ("em", "f1", "contains")] for m in modes},
        title=f"{config.name}: answer quality on {summary['n_questions']} {summary['split']} questions",
        ylabel="score",
    )
    settings = [
        f"- generator: `{summary['generator']}` ({summary['generator_source']}), greedy, "
        f"at most {summary['max_new_tokens']} new tokens, stop at newline",
        f"- data: `{config.data.dataset}`, split `{summary['split']}`, {summary['n_questions']} questions",
        f"- retrieval: {summary['retriever']} top-{summary['k']} over {summary['n_passages']} passages",
        f"- threads: {summary['threads']} torch thread(s)",
    ]
    section = [
        "## Answer quality",
        "",
        *quality_table(summary),
        "",
        "![answer quality](quality.png)",
        "",
        "EM and token F1 compare the normalised answer with every gold alias; containment asks whether a gold "
        "alias appears in the answer (the fairest score for a chatty 135M model). An either-or question is "
        "scored by the option the answer names: right only when it names the gold option and not the other. "
        "*Gold passage in top-k* is the share of questions whose gold passage the retriever placed in the prompt.",
        "",
        "## By question template",
        "",
        *template_table(summary),
        "",
        "*Format ok*: the answer names exactly one option (either-or), or is not empty (open questions). *Gold "
        "option first*: the share of questions whose gold is the first option named (0.5 by construction). "
        "Difficulty bands: how close the distractor's article is to the gold one (docs/task.md).",
        "",
        "## Examples",
        "",
        *example_table(examples),
        "",
    ]
    return settings, section


def _budget_note(seconds: float, config: Any) -> str:
    """`` (budget N s on 2 cores: within|OVER)`` when the recipe sets ``report.budget_seconds``, else empty."""
    budget = config.report.budget_seconds
    if budget is None:
        return ""
    return f" (budget {budget} s on 2 cores: {'within' if seconds <= budget else 'OVER'})"


def bundle_section(export_dir: Path) -> list[str]:
    """Where the run's bundle went and how to use it (the ``export`` stage's ``bundle.json``)."""
    record = json.loads((export_dir / "bundle.json").read_text())
    state = "unchanged since the last export (identical files)" if record["unchanged"] else "written"
    lines = [
        "## Bundle",
        "",
        f"**{record['name']} {record['version']}** {state}: `{record['path']}`"
        + (f" and `{record['archive']}`" if record.get("archive") else "")
        + f"; methods {', '.join(f'`{m}`' for m in record['methods'])}. Its model card is `README.md` in that "
        "directory; `workbench bundles` lists every bundle.",
        "",
        "```bash",
        f'workbench infer --bundle {record["path"]} --method {record["methods"][0]} "Who painted the Mona Lisa?"',
        f"workbench serve --bundle {record['path']}",
        "```",
        "",
    ]
    lines += [f"- {note}" for note in record.get("notes", [])]
    return [*lines, ""] if record.get("notes") else lines


def run(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` and its plots to the report directory; return the report path and total seconds.

    Sections follow the stages the run has: answer quality (``answer``), feature AUROCs (``collect``),
    calibration (``calibrate``), routing (``classify``), calibration transfer (``transfer``), retrievers by ΔSePer
    (``seper_eval``), the utility predictor (``fit_utility``), the methods side by side (``evaluate``) and the
    contrastive-decoding benchmark (``bench_decoding``), the exported bundle (``export``), then the time table.
    """
    from workbench.core.errors import ConfigError

    config = ctx.config
    if not ctx.inputs:
        raise ConfigError("the report stage needs answer, collect, calibrate, classify or evaluate before it", "stages")
    report_dir = config.resolved_report_dir
    times = _stage_times(ctx.run_dir, config.stages)
    pipeline_seconds = sum(seconds for _, seconds, _ in times)
    invocation_seconds = time.perf_counter() - ctx.run_started

    with atomic_directory(report_dir) as tmp:
        settings: list[str] = []
        body: list[str] = []
        if "answer" in ctx.inputs:
            settings, section = answer_section(ctx.inputs["answer"], tmp, config)
            body += section
        if "collect" in ctx.inputs:
            from workbench.stages.report_features import feature_section

            body += feature_section(ctx.inputs["collect"], tmp)
        if "calibrate" in ctx.inputs or "classify" in ctx.inputs:
            from workbench.stages.report_calibration import calibration_sections

            body += calibration_sections(ctx.inputs.get("calibrate"), ctx.inputs.get("classify"), tmp)
            from workbench.stages.report_ood import ood_section

            body += ood_section(ctx.inputs.get("calibrate"))
        if "transfer" in ctx.inputs:
            from workbench.stages.report_transfer import transfer_section

            body += transfer_section(ctx.inputs["transfer"], tmp)
        if "seper_eval" in ctx.inputs:
            from workbench.stages.seper_eval import seper_section

            body += seper_section(ctx.inputs["seper_eval"], tmp)
        if "fit_utility" in ctx.inputs:
            from workbench.stages.report_evaluate import utility_section

            body += utility_section(ctx.inputs["fit_utility"], tmp)
        if "distill_data" in ctx.inputs:
            from workbench.stages.report_distill import distill_data_lines

            body += distill_data_lines(ctx.inputs["distill_data"], tmp)
        if "distill" in ctx.inputs:
            from workbench.stages.report_distill import distill_lines

            body += distill_lines(ctx.inputs["distill"], tmp)
        if "tune_reader" in ctx.inputs:
            from workbench.stages.report_reader import reader_lines

            body += reader_lines(ctx.inputs["tune_reader"], tmp)
        if "study" in ctx.inputs:
            from workbench.stages.report_study import study_section

            body += study_section(ctx.inputs["study"], tmp)
        if "evaluate" in ctx.inputs:
            from workbench.stages.report_evaluate import evaluate_section

            body += evaluate_section(ctx.inputs["evaluate"], tmp)
        if "bench_decoding" in ctx.inputs:
            from workbench.stages.bench_decoding import decoding_section

            body += decoding_section(ctx.inputs["bench_decoding"], tmp, config.name)
        if "export" in ctx.inputs:
            body += bundle_section(ctx.inputs["export"])
        lines = [
            f"# {config.name} report",
            "",
            f"Regenerate with `{ctx.rerun}`; written {_dt.datetime.now():%Y-%m-%d %H:%M}.",
            "",
            *settings,
            "",
            *body,
            "## Time",
            "",
            "| stage | seconds (when last computed) | computed in this invocation |",
            "|---|---:|---|",
            *[f"| {name} | {seconds:.1f} | {'yes' if fresh else 'no (cached)'} |" for name, seconds, fresh in times],
            "",
            f"Whole pipeline from scratch: **{pipeline_seconds:.0f} s**{_budget_note(pipeline_seconds, config)}; "
            f"this invocation so far: {invocation_seconds:.0f} s. A one-time model conversion (~35 s) happens outside "
            "the stages on a fresh machine.",
            "",
        ]
        (tmp / "report.md").write_text("\n".join(lines), encoding="utf-8")
    ctx.log.info("report written to %s", report_dir / "report.md")
    return {"report": str(report_dir / "report.md"), "pipeline_seconds": round(pipeline_seconds, 1)}
