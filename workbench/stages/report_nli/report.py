"""The NLI judges report (``report_nli``): every judge's accuracy, per-class recall and speed, the cross-encoder's
training record, as ``report.md`` and ``judges.png`` (from the ``eval_nli`` stage's ``judges.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.reports.nli import judge_table_lines


def write_nli_report(record: dict[str, Any], best: str | None, out_dir: Path, *, name: str, rerun: str) -> Path:
    """Write ``report.md`` and ``judges.png`` for the judges record ``record`` (``training``, ``judges``) into
    ``out_dir``; ``best`` is the judge picked for short answers, ``name`` titles the report and ``rerun`` is the
    command that regenerates it. Returns the ``report.md`` path."""
    from workbench.plots import grouped_bars

    training, table = record["training"], record["judges"]
    measured = {k: v for k, v in table.items() if "skipped" not in v}
    grouped_bars(
        out_dir / "judges.png",
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
        f"# {name} report",
        "",
        f"Regenerate with `{rerun}`.",
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
    (out_dir / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return out_dir / "report.md"
