"""The findings of a run in a few lines: what the run found and what it ships, for the end of every run's output
and the top of its report.

At most four lines, each from the stages that made its figures, each left out when those stages did not run (or
their outputs cannot be read: a finding is never worth a crash after a run that succeeded):

* **answers** (``answer``): closed-book against RAG quality, and the question templates where retrieval helps most
  and where it hurts;
* **best feature** (``collect``): the feature with the highest AUROC for closed-book correctness on the held-out split,
  with its 90% BCa interval (:func:`~workbench.reports.auroc.auroc_interval`);
* **ships** (``classify``, ``export``): D²-RAG's decision — router, τ and who set it, the pick rule — as the bundle
  records it (:func:`~workbench.bundle.shipped.shipped_decision`), or, when the run exports nothing, as it would ship
  (:func:`~workbench.bundle.shipped.run_decision`);
* **held out**: that decision's retrieval rate and routed quality on the held-out split against Always-RAG and
  No-RAG (the bundle's routing rows, or classify's when τ is classify's own; none when a study or a parameters file
  moved τ and nothing re-measured it).

The runner prints them at the end of a run with the report's path (:func:`end_of_run_lines`); the report stage puts
the same lines at the top of ``report.md`` (:func:`findings_section`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.bundle.shipped import run_decision, shipped_decision, tau_text
from workbench.core.errors import WorkbenchError
from workbench.core.formatting import counted, fmt
from workbench.methods.learned import ROUTER_NAMES

log = logging.getLogger(__name__)

StageDir = Callable[[str], Path | None]
"""A stage's output directory in the run, or None when the run has no output of that stage."""

UNREADABLE = (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, WorkbenchError)
"""What reading a stage's outputs can raise when they are missing, partial or of an older layout."""


def answer_line(answer_dir: Path) -> str | None:
    """Closed-book → RAG containment on the answered split, and the template where retrieval helps most and the one
    where it hurts most (when it hurts any); None without both modes."""
    summary = json.loads((answer_dir / "summary.json").read_text())
    modes, by = summary["modes"], summary.get("by_template") or {}
    if "closed_book" not in modes or "rag" not in modes:
        return None
    where = f"{summary['split']}, {counted(summary['n_questions'], 'question')}"
    line = (
        f"Answers ({where}): closed-book {fmt(modes['closed_book']['contains'])} → RAG "
        f"{fmt(modes['rag']['contains'])} containment"
    )
    lifts = {
        t: (row["contains"], by["rag"][t]["contains"])
        for t, row in (by.get("closed_book") or {}).items()
        if t in (by.get("rag") or {})
    }
    if len(lifts) > 1:
        best = max(lifts, key=lambda t: lifts[t][1] - lifts[t][0])
        worst = min(lifts, key=lambda t: lifts[t][1] - lifts[t][0])
        line += f"; retrieval helps {best} most ({fmt(lifts[best][0], 2)} → {fmt(lifts[best][1], 2)})"
        if lifts[worst][1] < lifts[worst][0]:
            line += f" and hurts {worst} ({fmt(lifts[worst][0], 2)} → {fmt(lifts[worst][1], 2)})"
    return line + "."


def feature_line(collect_dir: Path, split: str | None) -> str | None:
    """The feature with the highest AUROC on ``split`` (the held-out split; None: ``test`` when collected, else the
    last collected split) with its interval; None without any AUROC."""
    from workbench.reports.auroc import auroc_interval, split_rows

    summary = json.loads((collect_dir / "summary.json").read_text())
    splits = list(summary["splits"])
    split = split if split in splits else ("test" if "test" in splits else splits[-1])
    aurocs = {f: v for f, v in summary["splits"][split]["auroc_correct_contains"].items() if v is not None}
    if not aurocs:
        return None
    best = max(aurocs, key=lambda f: aurocs[f])
    rows = split_rows(collect_dir, split)
    bound = auroc_interval(rows, best)
    interval = (
        f"90% interval {bound[0]:.2f} – {bound[1]:.2f}"
        if bound is not None
        else "too few correct or wrong answers for an interval"
    )
    return (
        f"Best feature: {best}, AUROC {aurocs[best]:.3f} for closed-book correctness on {split} "
        f"({interval}; {counted(len(rows), 'question')})."
    )


def _exported_manifest(export_dir: Path | None) -> dict[str, Any] | None:
    """The manifest of the bundle the run exported (the path ``export`` recorded), or None."""
    if export_dir is None or not (export_dir / "bundle.json").is_file():
        return None
    bundle = Path(json.loads((export_dir / "bundle.json").read_text())["path"])
    manifest = bundle / "manifest.json"
    return json.loads(manifest.read_text()) if manifest.is_file() else None


def _reference_rows(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(r.get("router")): r for r in rows if isinstance(r, dict)}


def decision_lines(config: Any, stage_dir: StageDir) -> list[str]:
    """What ships and its held-out figures (module docstring); [] when the run has no D²-RAG decision."""

    manifest = _exported_manifest(stage_dir("export"))
    decision = shipped_decision(manifest) if manifest is not None else run_decision(config, stage_dir)
    if decision is None:
        return []
    ships = f"Ships: D²-RAG router {decision.name}; τ = {tau_text(decision)}, set by {decision.tau.origin(quote='')}"
    ships += f"; pick rule: {decision.rule}." if decision.rule else "."
    held = decision.held_out
    if manifest is not None:
        routing = (manifest.get("metrics") or {}).get("routing") or {}
        references = _reference_rows(routing.get("rows") or [])
        split, questions = (held.split, held.questions) if held is not None else (routing.get("split"), None)
        routed = (held.retrieval_rate, held.contains) if held is not None else None
    else:
        classify = stage_dir("classify")
        routing = json.loads((classify / "routing.json").read_text())
        selection = json.loads((classify / "selection.json").read_text())
        references = _reference_rows(routing["rows"])
        chosen = "Router" if selection.get("router") else ROUTER_NAMES[selection["chosen"]]
        split, questions = routing["split"], None
        row = references.get(chosen)
        # classify's row was measured at classify's τ: it is this decision's only when classify set τ
        routed = (row["retrieval_rate"], row["contains"]) if row and decision.tau.set_by == "classify" else None
    if routed is None:
        return [
            ships,
            f"Held out ({split}): no figure at the shipped τ (the {decision.tau.set_by} set it after classify "
            "measured the routing).",
        ]
    where = f"{split}, {counted(questions, 'question')}" if questions is not None else str(split)
    always, never = references.get("Always-RAG", {}), references.get("No-RAG", {})
    return [
        ships,
        f"Held out ({where}): retrieval rate {fmt(routed[0], 2)}; routed containment {fmt(routed[1])} vs "
        f"Always-RAG {fmt(always.get('contains'))} and No-RAG {fmt(never.get('contains'))}.",
    ]


def _held_out_split(stage_dir: StageDir) -> str | None:
    """The split calibrate measured the features on (its ``eval_split``); None without calibrate's summary."""
    calibrate = stage_dir("calibrate")
    if calibrate is None or not (calibrate / "summary.json").is_file():
        return None
    return json.loads((calibrate / "summary.json").read_text()).get("eval_split")


def run_findings(config: Any, stage_dir: StageDir) -> list[str]:
    """The run's findings (module docstring), from whichever stages' outputs ``stage_dir`` finds; each finding whose
    outputs cannot be read is left out (and logged at debug level)."""
    builders: list[tuple[str, Callable[[], Any]]] = []
    if stage_dir("answer") is not None:
        builders.append(("answer", lambda: answer_line(stage_dir("answer"))))
    if stage_dir("collect") is not None:
        builders.append(("collect", lambda: feature_line(stage_dir("collect"), _held_out_split(stage_dir))))
    if stage_dir("classify") is not None:
        builders.append(("classify", lambda: decision_lines(config, stage_dir)))
    lines: list[str] = []
    for stage, build in builders:
        try:
            found = build()
        except UNREADABLE as exc:
            log.debug("no finding from %s's outputs: %s", stage, exc)
            continue
        lines += [found] if isinstance(found, str) else list(found or [])
    return lines


def findings_section(lines: list[str]) -> list[str]:
    """The findings as the top of ``report.md``: a *Findings* heading and one bullet per line ([] when none)."""
    if not lines:
        return []
    return ["## Findings", "", *(f"- {line}" for line in lines), ""]


def end_of_run_lines(config: Any, run_dir: Path, report: str | None) -> list[str]:
    """The findings the runner prints when a run ends: :func:`run_findings` over the run's finished stages, then the
    report's path (``report``: None when the run wrote none)."""

    def stage_dir(name: str) -> Path | None:
        path = run_dir / "stages" / name
        return path if name in config.stages and (path / "_stage.json").is_file() else None

    lines = run_findings(config, stage_dir)
    return lines + ([f"Report: {report}"] if report else [])
