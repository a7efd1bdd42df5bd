"""The report's study section: chosen vs default parameters on val and test, trial kinds and speed, optimisation
history, parameter importances and the Pareto front, and how to open the storage in optuna-dashboard."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.core.formatting import fmt
from workbench.plots.trials import history_plot, pareto_plot
from workbench.reports.section import Section, SectionInput


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k} = {fmt(v, 4, style='g')}" for k, v in params.items()) or "–"


def study_section(study_dir: Path, out_dir: Path) -> list[str]:
    """Markdown lines (and PNGs under ``out_dir``) for a study stage's output."""
    summary = json.loads((study_dir / "summary.json").read_text())
    methods, objective = summary["methods"], summary["objective"]
    n = summary["questions"]
    lines = [
        "## Hyperparameter studies",
        "",
        f"One Optuna study per method, {objective} maximised on the first {n['val']} `{summary['split']}` questions"
        + (" and tokens per question minimised (NSGA-II)" if summary["multi_objective"] else "")
        + (f", subject to {summary['constraints']}" if summary["constraints"] else "")
        + f"; the chosen parameters and the defaults then scored once on {n['test']} `{summary['test_split']}` "
        "questions no trial read. Costs count cached generations at their uncached price.",
        "",
        f"| method | chosen | {objective} val | {objective} test | retrieval test | tokens / q test "
        f"| defaults | {objective} val | {objective} test | retrieval test | tokens / q test | trials |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, row in methods.items():
        best, dflt = row["scores"]["best"], row["scores"]["defaults"]
        lines.append(
            f"| {name} | {_params(row['params'])}{'' if row['feasible'] else ' (infeasible)'} "
            f"| {best['val'][objective]:.3f} | {best['test'][objective]:.3f} | {best['test']['retrieval_rate']:.2f} "
            f"| {best['test']['tokens']:.0f} | {_params(row['defaults'])} | {dflt['val'][objective]:.3f} "
            f"| {dflt['test'][objective]:.3f} | {dflt['test']['retrieval_rate']:.2f} | {dflt['test']['tokens']:.0f} "
            f"| {len(row['trials'])} |"
        )
    for name, row in methods.items():  # a learned threshold the study found (it ships only when its verdict says)
        if row.get("tau_verdict"):
            lines += [
                "",
                f"{name}'s τ: the study chose τ = {fmt(row['tau_found'], 4, style='g')}, which "
                f"{row['tau_verdict']['reason']}.",
            ]
    lines += [
        "",
        "| method | trial kind | trials (all workers) | seconds | trials / s |",
        "|---|---|---:|---:|---:|",
    ]
    for name, row in methods.items():
        for kind, k in row["kinds"].items():
            lines.append(f"| {name} | {kind} | {k['trials']} | {k['seconds']:.1f} | {k['per_second']:.3g} |")
    lines += [
        "",
        "*replay*: a threshold re-routes answers made once at always-retrieve (no generation); *decode*: the method "
        "ran (new α, or the first trial of a setting); *memo*: parameters seen before.",
        "",
    ]
    importances = {m: r.get("importances") for m, r in methods.items() if r.get("importances")}
    if importances:
        lines += ["Parameter importances (Optuna's fANOVA over the complete trials):", ""]
        for m, imp in importances.items():
            lines.append(f"- {m}: " + ", ".join(f"{k} {v:.2f}" for k, v in imp.items()))
        lines.append("")
    history_plot(out_dir / "study_history.png", methods, objective)
    lines += ["![optimisation history](study_history.png)", ""]
    if summary["multi_objective"]:
        pareto_plot(out_dir / "study_pareto.png", methods, objective)
        lines += ["![Pareto front](study_pareto.png)", ""]
    storage = summary["storage"]
    if storage.startswith("sqlite:///") and not storage.startswith("sqlite:////"):  # relative: fails elsewhere
        storage = f"sqlite:///{Path(storage[len('sqlite:///') :]).resolve()}"
    lines += [
        f"Storage: `{storage}`. Browse it with `pip install optuna-dashboard && optuna-dashboard {storage}`; "
        f"the chosen parameters are in `{study_dir.name}/params/<method>.json`, which the evaluate stage and the "
        "export read.",
        "",
    ]
    return lines


def section(view: SectionInput) -> Section:
    """The ``study`` stage's section of the run's report (:func:`study_section`)."""
    return Section(study_section(view.stage_dir, view.out_dir))
