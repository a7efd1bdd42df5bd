"""D²-RAG's section of the evaluate report: the learned utility next to the oracle ΔSePer (the spec's ``report``,
called by :mod:`workbench.stages.evaluate.report`)."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["d2rag_utility_lines", "utility_class_of"]


def utility_class_of(trace_json: str) -> str:
    """D²-RAG's utility class for one answer from its trace: relevant / neutral / noisy, or closed (no retrieval)."""
    steps = json.loads(trace_json)["steps"]
    for step in reversed(steps):
        if step["name"] == "generate":
            return str(step["detail"].get("class", "closed"))
    return "closed"


def d2rag_utility_lines(evaluate_dir: Path) -> list[str]:
    """Markdown: D²-RAG with the learned utility next to D²-RAG with the oracle ΔSePer (both must have run).

    Per variant: quality, how many answers fell in each decoding class; then the per-question agreement of the two
    variants' classes (among questions both retrieved for, which is all of them: stage 1 is shared)."""
    import datasets

    summary = json.loads((evaluate_dir / "summary.json").read_text())["methods"]
    if not {"d2rag", "d2rag_oracle"} <= set(summary):
        return []
    traces = datasets.load_from_disk(str(evaluate_dir / "traces"))
    classes: dict[str, dict[str, str]] = {"d2rag": {}, "d2rag_oracle": {}}
    for method, qid, trace in zip(traces["method"], traces["id"], traces["trace"], strict=True):
        if method in classes:
            classes[method][qid] = utility_class_of(trace)
    names = ("relevant", "neutral", "noisy", "closed")
    lines = [
        "### D²-RAG: learned vs oracle utility",
        "",
        "`d2rag` decides the decoding mode from the gold-free utility predictor (`fit_utility`); `d2rag_oracle` "
        "from ΔSePer computed with the gold answer (the paper's utility, evaluation only). Stage 1 (retrieve or "
        "not) is the same for both.",
        "",
        "| utility | EM | token F1 | containment | " + " | ".join(names) + " |",
        "|---|---:|---:|---:|" + "---:|" * len(names),
    ]
    for method, label in (("d2rag", "learned"), ("d2rag_oracle", "oracle ΔSePer")):
        row = summary[method]
        counts = [sum(c == n for c in classes[method].values()) for n in names]
        lines.append(
            f"| {label} | {row['em']:.3f} | {row['f1']:.3f} | {row['contains']:.3f} | "
            + " | ".join(str(c) for c in counts)
            + " |"
        )
    shared = [q for q in classes["d2rag"] if q in classes["d2rag_oracle"] and classes["d2rag"][q] != "closed"]
    if shared:
        same = sum(classes["d2rag"][q] == classes["d2rag_oracle"][q] for q in shared)
        lines += ["", f"The two utilities pick the same class for {same} of the {len(shared)} retrieved questions."]
    return [*lines, ""]
