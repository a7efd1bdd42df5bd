"""The answer-quality section of the run report: quality and cost per answering mode, accuracy per question
template (a table and ``by_template.png``: closed-book vs RAG per template with intervals), a few example answers,
and ``quality.png`` (from the ``answer`` stage's ``summary.json`` and
``examples.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.core.formatting import counted, fmt
from workbench.reports.modes import MODE_TITLES
from workbench.reports.section import Section, SectionInput

"""Answering mode → the title the reports print."""


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


def template_intervals(by_mode: dict[str, dict[str, Any]], templates: list[str]) -> list[tuple[float, float] | None]:
    """The 90% Wilson interval of each template's accuracy in one mode (``by_mode``: the summary's per-template rows
    of that mode; containment is right or wrong per question, so accuracy × n counts the right ones); None where
    the mode has no question of the template."""
    from workbench.metrics.proportion import wilson_interval

    out = []
    for template in templates:
        row = by_mode.get(template)
        out.append(None if not row else wilson_interval(round(row["contains"] * row["n"]), row["n"]))
    return out


def template_plot(summary: dict[str, Any], path: Path) -> Path:
    """``path``: accuracy per question template, one bar per answering mode (closed-book, RAG, gold passage), each
    with its 90% Wilson interval — where retrieval helps and where it hurts, at a glance."""
    from workbench.plots import grouped_bars

    by = summary["by_template"]
    templates = sorted({t for per_mode in by.values() for t in per_mode})
    long_names = len(templates) > 3 or max(len(t) for t in templates) > 12
    counts = {t: max((per_mode.get(t) or {}).get("n", 0) for per_mode in by.values()) for t in templates}
    return grouped_bars(
        path,
        [f"{t} (n = {counts[t]})" for t in templates],
        {MODE_TITLES.get(m, m): [(by[m].get(t) or {}).get("contains") for t in templates] for m in by},
        title=f"Accuracy by question template on {counted(summary['n_questions'], summary['split'] + ' question')}: "
        "closed-book vs RAG (error bars: 90% Wilson intervals)",
        ylabel="accuracy (containment)",
        rotate=30 if long_names else 0,
        intervals={MODE_TITLES.get(m, m): template_intervals(by[m], templates) for m in by},
    )


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
    """``(setting lines, section lines)`` for the ``answer`` stage, with ``quality.png`` and ``by_template.png``
    written to ``out_dir``."""
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
    template_plot(summary, out_dir / "by_template.png")
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
        "![accuracy by template: closed-book vs RAG](by_template.png)",
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


def section(view: SectionInput) -> Section:
    """The ``answer`` stage's section of the run's report (:func:`answer_section`), its settings in the report's
    setup list."""
    setup, lines = answer_section(view.stage_dir, view.out_dir, view.config)
    return Section(lines, setup)
