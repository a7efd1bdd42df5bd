"""Report section for the ``evaluate`` stage: the methods side by side (quality, retrieval, cost, latency)."""

from __future__ import annotations

import json
from pathlib import Path


def evaluate_section(evaluate_dir: Path, out_dir: Path) -> list[str]:
    """Markdown lines comparing every evaluated method, with ``methods_quality.png`` / ``methods_cost.png``."""
    from workbench.plots import grouped_bars

    summary = json.loads((evaluate_dir / "summary.json").read_text())
    methods = summary["methods"]
    names = list(methods)
    grouped_bars(
        out_dir / "methods_quality.png",
        names,
        {
            label: [methods[m][key] for m in names]
            for key, label in (("em", "EM"), ("f1", "token F1"), ("contains", "containment"))
        },
        title=f"Methods on {summary['questions']} {summary['split']} questions",
        ylabel="score",
        rotate=30,
    )
    grouped_bars(
        out_dir / "methods_cost.png",
        names,
        {
            "LM calls / q": [methods[m]["lm_calls"] for m in names],
            "p50 latency (s)": [methods[m]["latency_p50"] for m in names],
        },
        title="Cost per question",
        ylabel="value",
        ylim=None,
        rotate=30,
    )
    lines = [
        "## Methods end to end",
        "",
        f"{summary['questions']} `{summary['split']}` questions per method; every answer's trace (each step with its "
        "decisions and cost) is in the run's `stages/evaluate/traces` dataset. `oracle` reads the gold answer "
        "(an upper bound for routing).",
        "",
        "| method | EM | token F1 | containment | retrieval rate | LM calls / q | tokens / q | NLI pairs / q "
        "| latency p50 (s) | p95 (s) | fallbacks |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in methods.items():
        lines.append(
            f"| {name} | {row['em']:.3f} | {row['f1']:.3f} | {row['contains']:.3f} | {row['retrieval_rate']:.2f} "
            f"| {row['lm_calls']:.1f} | {row['tokens']:.0f} | {row['nli_pairs']:.0f} | {row['latency_p50']:.2f} "
            f"| {row['latency_p95']:.2f} | {row['fallbacks']} |"
        )
    for method, note in summary.get("notes", {}).items():
        lines.append(f"\n*{method}*: {note}.")
    lines += ["", "![methods quality](methods_quality.png) ![methods cost](methods_cost.png)", ""]
    return lines
