"""Report section for the ``evaluate`` stage: the methods side by side (quality, retrieval, cost, latency)."""

from __future__ import annotations

import json
from pathlib import Path

from workbench.core.formatting import counted
from workbench.reports.section import Section, SectionInput


def evaluate_section(evaluate_dir: Path, out_dir: Path) -> list[str]:
    """Markdown lines comparing every evaluated method, with ``methods_quality.png`` / ``methods_cost.png``."""
    from workbench.methods.registry import METHODS
    from workbench.plots import grouped_bars, unit_panels

    summary = json.loads((evaluate_dir / "summary.json").read_text())
    rank = {name: i for i, name in enumerate(METHODS)}  # summaries written before "order" existed: registry order
    names = summary.get("order") or sorted(summary["methods"], key=lambda m: rank.get(m, len(rank)))
    methods = {name: summary["methods"][name] for name in names}
    grouped_bars(
        out_dir / "methods_quality.png",
        names,
        {
            label: [methods[m][key] for m in names]
            for key, label in (("em", "EM"), ("f1", "token F1"), ("contains", "containment"))
        },
        title=f"Methods on {counted(summary['questions'], summary['split'] + ' question')}",
        ylabel="score",
        rotate=30,
    )
    unit_panels(
        out_dir / "methods_cost.png",
        names,
        {
            "LM calls per question": ([methods[m]["lm_calls"] for m in names], "LM calls"),
            "p50 latency per question": ([methods[m]["latency_p50"] for m in names], "seconds"),
        },
        title="Cost per question",
    )
    lines = [
        "## Methods end to end",
        "",
        f"{summary['questions']} `{summary['split']}` question{'' if summary['questions'] == 1 else 's'} per "
        "method; every answer's trace (each step with its "
        "decisions and cost) is in the run's `stages/evaluate/traces` dataset. `oracle` reads the gold answer "
        "(an upper bound for routing). "
        + (
            "Generations were **reused** from the on-disk cache where earlier stages made them, so LM calls, tokens "
            "and latency understate the cost of methods whose answers were cached."
            if summary.get("reuse_generations")
            else "Every method generated its own text (generation cache off), so LM calls, tokens and latency are "
            "each method's own."
        )
        + (
            " DTR answers a batch of questions together: each batched call's cost and wall time are split evenly "
            "over the batch's questions, so its LM calls / q and latency are per-question shares (throughput), "
            "where the other methods' are one question's own."
            if "dtr" in names
            else ""
        ),
        "",
        "Decision accuracy: the share of questions whose retrieve decision is right, the label being "
        '"`no_rag`\'s closed-book answer is wrong" (containment; – without `no_rag` in the run); containment is '
        "AdaRAGUE's In-Accuracy (the gold answer in the output); RC: retrieval calls "
        "per question; LMC: LM calls per question." + interval_words(summary),
        "",
        "| method | EM | token F1 | containment | decision accuracy | retrieval rate | RC / q | LMC / q | tokens / q "
        "| NLI pairs / q | latency p50 (s) | p95 (s) | fallbacks |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in methods.items():
        quality = " | ".join(quality_cell(row, key) for key in ("em", "f1", "contains", "decision_accuracy"))
        rest = f"{optional_cell(row, 'retrieval_rate', 2)} | {optional_cell(row, 'retrieval_calls', 2)}"
        lines.append(
            f"| {name} | {quality} | {rest} | {row['lm_calls']:.1f} "
            f"| {row['tokens']:.0f} | {row['nli_pairs']:.0f} | {row['latency_p50']:.2f} | {row['latency_p95']:.2f} "
            f"| {row['fallbacks']} |"
        )
    for method, note in summary.get("notes", {}).items():
        lines.append(f"\n*{method}*: {note}.")
    lines += ["", "![methods quality](methods_quality.png) ![methods cost](methods_cost.png)", ""]
    return lines + method_sections(evaluate_dir, names)


def interval_words(summary: dict) -> str:
    """The sentence saying how the evaluate table's intervals were made (the summary's ``bootstrap``), with a leading
    space; empty for a summary written before intervals existed."""
    from workbench.metrics.bootstrap import describe

    boot = summary.get("bootstrap")
    if boot is None:
        return ""
    made = describe(boot["draws"], boot["level"]).replace("intervals", "interval")
    return (
        f" EM, token F1, containment and decision accuracy are means over the questions, each with its {made} in"
        " brackets."
    )


def quality_cell(row: dict, key: str) -> str:
    """An evaluate-table quality cell: ``row[key]`` with its BCa interval (``row["intervals"][key]``) as
    ``0.62 [0.48, 0.75]``; to three decimals without one (a summary written before intervals existed), – when the
    value is missing or NaN."""
    interval = (row.get("intervals") or {}).get(key)
    if interval is None or interval[0] is None or interval[1] is None:
        return optional_cell(row, key, 3)
    return f"{optional_cell(row, key, 2)} [{interval[0]:.2f}, {interval[1]:.2f}]"


def protocol_cells(row: dict) -> str:
    """The cells decision accuracy | retrieval rate | RC of a routing-table or evaluate-table row (Markdown)."""
    rate = optional_cell(row, "retrieval_rate", 2)
    return f"{optional_cell(row, 'decision_accuracy', 3)} | {rate} | {optional_cell(row, 'retrieval_calls', 2)}"


def optional_cell(row: dict, key: str, digits: int) -> str:
    """``row[key]`` to ``digits`` decimals, or – where a table written before the column existed lacks it (or holds
    None / NaN: e.g. decision accuracy without a closed-book label)."""
    value = row.get(key)
    return "–" if value is None or value != value else f"{value:.{digits}f}"


def method_sections(evaluate_dir: Path, names: list[str]) -> list[str]:
    """The evaluated methods' own report sections (each spec's ``report``, once per section, in ``names``' order)."""
    from workbench.methods.registry import METHOD_TABLE

    seen, lines = set(), []
    for name in names:
        report = METHOD_TABLE[name].report if name in METHOD_TABLE else None
        if report is not None and report not in seen:
            seen.add(report)
            lines += report(evaluate_dir)
    return lines


def section(view: SectionInput) -> Section:
    """The ``evaluate`` stage's section of the run's report (:func:`evaluate_section`)."""
    return Section(evaluate_section(view.stage_dir, view.out_dir))
