"""Report section for the ``calibrate`` stage: each feature's calibrator and why, calibration quality before and after
(reliability diagrams), AUROC / PRR per feature and the features' correlation; the out-of-distribution check
(:mod:`workbench.stages.calibrate.ood_report`) closes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from workbench.calibration.choice import CalibratorChoice
from workbench.core.formatting import fmt
from workbench.metrics.rejection import spearman
from workbench.plots import grouped_bars, heatmap, reliability_grid
from workbench.reports.section import Section, SectionInput
from workbench.stages.calibrate.ood_report import ood_section


def _minmax(values: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Raw scores mapped to [0, 1] by the fit split's range (the 'before calibration' probabilities)."""
    lo, hi = float(np.min(reference)), float(np.max(reference))
    return np.clip((values - lo) / (hi - lo), 0.0, 1.0) if hi > lo else np.full(values.shape, 0.5)


def calibration_lines(calibrate_dir: Path, out_dir: Path) -> tuple[list[str], str]:
    """Markdown for the calibration section (+ its PNGs in ``out_dir``); also returns the evaluation split."""

    meta = json.loads((calibrate_dir / "summary.json").read_text())
    metrics = json.loads((calibrate_dir / "metrics.json").read_text())
    data = json.loads((calibrate_dir / "calibrated.json").read_text())
    features, fit = meta["features"], meta["fit_split"]
    split = meta.get("eval_split") or next((s for s in sorted(data) if s != fit), fit)
    labels = np.asarray(data[split]["label"])
    bad = meta["nan"]["bad_values"]
    n_bad = sum(sum(v.values()) for v in bad.values())
    chosen = "Calibrators chosen per feature" if meta["kind"] == "auto" else f"`{meta['kind']}` calibrators"
    lines = [
        "## Calibration",
        "",
        f"{chosen} for `{meta['label']}` fitted on `{fit}` (out of fold there: each question "
        f"calibrated by a calibrator that never saw it) and applied to `{split}` ({len(labels)} questions, "
        f"{int(labels.sum())} positive). NaN / inf values: {n_bad}, policy `{meta['nan']['policy']}`"
        + (f" ({json.dumps(bad)})" if n_bad else "")
        + ".",
        "",
        *choice_lines(meta),
        "Ranking metrics before and after calibration — a calibrator may merge close scores into one step, "
        "which can only lower AUROC / PRR; ECE and Brier are for the calibrated probabilities.",
        "",
        "| feature | AUROC before → after | PRR before → after | AURAC after | ECE after | Brier after |",
        "|---|---|---|---:|---:|---:|",
    ]
    for name in features:
        m = metrics[name][split]
        b, a = m["before"], m["after"]
        lines.append(
            f"| {name} | {fmt(b['auroc'])} → {fmt(a['auroc'])} | {fmt(b['prr'])} → {fmt(a['prr'])} | {fmt(a['aurac'])} "
            f"| {fmt(a['ece'])} | {fmt(a['brier'])} |"
        )
    ranked = sorted(features, key=lambda f: -(metrics[f][split]["after"]["auroc"] or 0.0))
    panels = {}
    for name in ranked[:4]:
        raw_fit = np.asarray(data[fit]["raw"][name])
        raw = np.asarray(data[split]["raw"][name])
        panels[name] = (_minmax(raw, raw_fit), np.asarray(data[split]["calibrated"][name]), labels)
    reliability_grid(out_dir / "reliability.png", panels, title=f"Reliability on {split}: min-max raw vs calibrated")
    grouped_bars(
        out_dir / "feature_auroc_prr.png",
        features,
        {
            "AUROC": [metrics[f][split]["after"]["auroc"] or 0.5 for f in features],
            "PRR": [metrics[f][split]["after"]["prr"] or 0.0 for f in features],
        },
        title=f"Calibrated features on {split}: AUROC and PRR",
        ylabel="score",
        ylim=None,
        rotate=45,
    )
    raw = np.asarray([data[split]["raw"][f] for f in features])
    corr = np.asarray([[spearman(raw[i], raw[j]) for j in range(len(features))] for i in range(len(features))])
    heatmap(out_dir / "feature_correlation.png", corr, features, title=f"Spearman correlation of features on {split}")
    lines += [
        "",
        "![reliability](reliability.png)",
        "",
        "The four best-ranking features; *before* maps the raw score to [0, 1] by the fit split's range.",
        "",
        "![AUROC and PRR per feature](feature_auroc_prr.png)",
        "",
        "![feature correlation](feature_correlation.png)",
        "",
    ]
    return lines, split


RULE_WORDS = {
    "log_loss": "lowest log loss",
    "ranking": "lowest log loss that keeps the ranking",
    "fixed": "set by the recipe",
    "too_few": "too few of a class to compare",
}
"""How each choice rule (:data:`workbench.calibration.choice.RULES`) reads in the report."""


def choice_lines(meta: dict[str, Any]) -> list[str]:
    """Markdown: which calibrator each feature got and why (``summary.json``'s ``choices``; nothing for a run made
    before them) — every candidate's out-of-fold log loss on the fit split, the raw score's AUROC there against the
    chosen calibrator's out-of-fold one, and a bold line for each feature whose calibrator loses ranking."""

    records = meta.get("choices")
    if not records:
        return []
    choices = {name: CalibratorChoice.from_dict(record) for name, record in records.items()}
    kinds = list(meta.get("candidates") or next(iter(choices.values())).candidates)
    lines = [
        f"Each feature's calibrator: among {', '.join(f'`{k}`' for k in kinds)}, the one with the lowest out-of-fold "
        f"log loss on `{meta['fit_split']}` (the same folds for every kind), unless it loses ranking the raw score "
        f"had — its map not strictly increasing and its out-of-fold AUROC more than {meta.get('rank_tolerance', 0.01)} "
        "below the raw score's —, then the lowest-loss one that keeps it. A strictly increasing map (Platt, beta "
        "calibration, unless fitted flat) keeps every order of the raw scores, so its AUROC is the raw score's on any "
        "data (*same order* below).",
        "",
        "| feature | calibrator | chosen by | " + " | ".join(f"log loss {k}" for k in kinds) + " | AUROC raw → "
        "calibrated (out of fold) | ranking |",
        "|---|---|---|" + "---:|" * len(kinds) + "---|---|",
    ]
    for name, choice in choices.items():
        losses = {c.kind: fmt(c.log_loss) for c in choice.candidates}
        cells = [f"**{losses[k]}**" if k == choice.chosen else losses.get(k, "–") for k in kinds]
        ranking = "**lost**" if choice.ranking_lost else "kept"
        after = "same order" if choice.chosen_fit.strictly_increasing else fmt(choice.chosen_fit.auroc)
        lines.append(
            f"| {name} | `{choice.chosen}` | {RULE_WORDS[choice.rule]} | {' | '.join(cells)} "
            f"| {fmt(choice.raw_auroc)} → {after} | {ranking} |"
        )
    notes = [
        f"- **{name}**: {choice.describe()}."
        for name, choice in choices.items()
        if choice.ranking_lost or choice.rule == "ranking"
    ]
    return [*lines, "", *notes, *([""] if notes else [])]


def section(view: SectionInput) -> Section:
    """The ``calibrate`` stage's section of the run's report (:func:`calibration_lines`), closed by the
    out-of-distribution check; when the run also routes, the check closes ``classify``'s section instead, after
    the routing that follows calibration (:func:`workbench.stages.classify.report.section`)."""
    lines = calibration_lines(view.stage_dir, view.out_dir)[0]
    return Section(lines if view.stage_output("classify") else lines + ood_section(view.stage_dir))
