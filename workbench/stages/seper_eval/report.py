"""The retrieval-utility section of a run's main report (``report`` stage): the ``seper_eval`` stage's retrievers
ranked by mean ΔSePer, with intervals and gold-passage recall, as Markdown lines and a bar plot (from its
``summary.json``)."""

from __future__ import annotations

import json
from pathlib import Path

from workbench.reports.section import Section, SectionInput


def seper_section(seper_dir: Path, out_dir: Path) -> list[str]:
    """Report lines: retrievers ranked by mean ΔSePer, with intervals and gold-passage recall, plus a bar plot.

    Reads ``seper_dir/summary.json`` (the ``seper_eval`` stage's output); saves the plot as
    ``out_dir/seper_retrievers.png`` and returns the section's Markdown lines, which link to it."""
    from workbench.plots import grouped_bars

    summary = json.loads((seper_dir / "summary.json").read_text())
    entries = summary["retrievers"]
    ranking = summary["ranking"]
    grouped_bars(
        out_dir / "seper_retrievers.png",
        ranking,
        {
            "ΔSePer-S": [entries[k]["delta_seper_s"]["mean"] for k in ranking],
            "ΔSePer-H": [entries[k]["delta_seper_h"]["mean"] for k in ranking],
        },
        title=f"Retrieval utility on {summary['questions']} {summary['split']} questions (top-{summary['k']}; "
        "error bars: 90% intervals of the mean)",
        ylabel="mean ΔSePer",
        ylim=None,
        intervals={
            "ΔSePer-S": [(entries[k]["delta_seper_s"]["low"], entries[k]["delta_seper_s"]["high"]) for k in ranking],
            "ΔSePer-H": [(entries[k]["delta_seper_h"]["low"], entries[k]["delta_seper_h"]["high"]) for k in ranking],
        },
    )
    lines = [
        "## Retrievers ranked by retrieval utility (ΔSePer)",
        "",
        f"{summary['questions']} `{summary['split']}` questions, top-{summary['k']} of {summary['passages']} passages "
        "(every chunk of the questions' gold documents plus random others) per retriever. ΔSePer = "
        "the model's belief in the gold answer with the passages minus without them (gold-dependent: an evaluation, "
        f"not a runtime signal); intervals are {summary.get('intervals', 'bootstrap 90% intervals')} of the mean.",
        "",
        "| rank | retriever | mean ΔSePer-S (90% interval) | mean ΔSePer-H (90% interval) | SePer-S with passages "
        "| closed-book SePer-S | gold passage retrieved |",
        "|---:|---|---|---|---:|---:|---:|",
    ]
    for rank, kind in enumerate(ranking, start=1):
        e = entries[kind]
        s, h = e["delta_seper_s"], e["delta_seper_h"]
        recall = "–" if e["gold_recall"] is None else f"{e['gold_recall']:.2f}"
        lines.append(
            f"| {rank} | {kind} | {s['mean']:+.3f} ({s['low']:+.3f} – {s['high']:+.3f}) "
            f"| {h['mean']:+.3f} ({h['low']:+.3f} – {h['high']:+.3f}) | {e['seper_s']:.3f} | {e['seper_s_closed']:.3f} "
            f"| {recall} |"
        )
    return [*lines, "", "![retrievers by ΔSePer](seper_retrievers.png)", ""]


def section(view: SectionInput) -> Section:
    """The ``seper_eval`` stage's section of the run's report (:func:`seper_section`)."""
    return Section(seper_section(view.stage_dir, view.out_dir))
