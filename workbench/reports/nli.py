"""The NLI judges' table (accuracy, per-class recall and speed of every judge), shared by the ``report_nli`` stage's
report (:mod:`workbench.stages.report_nli.report`) and the backends benchmark's
(:mod:`workbench.bench.backends.report`)."""

from __future__ import annotations

from typing import Any

from workbench.data.nli_labels import NLI_LABELS


def judge_table_lines(table: dict[str, Any]) -> list[str]:
    """Markdown rows: accuracy, per-class recall and speed of every judge on both evaluation sets."""
    lines = [
        "| judge | NLI pairs: accuracy | recall C / N / E | pairs/s | short answers: accuracy | pairs/s |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for kind, row in table.items():
        if "skipped" in row:
            lines.append(f"| {kind} | skipped: {row['skipped']} | | | | |")
            continue
        nli, short = row["nli_pairs"], row["short_answers"]
        recall = " / ".join(f"{nli['recall'].get(c, float('nan')):.2f}" for c in NLI_LABELS)
        lines.append(
            f"| {kind} | {nli['accuracy']:.3f} (n={nli['n']}) | {recall} | {nli['pairs_per_s']:.0f} "
            f"| {short['accuracy']:.3f} (n={short['n']}) | {short['pairs_per_s']:.0f} |"
        )
    return lines
