"""Report section for the ``fit_utility`` stage: the gold-free utility predictor's out-of-fold agreement with its
gold-dependent label, its weights and ``utility_fit.png``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.core.formatting import fmt, markdown_table
from workbench.reports.section import Section, SectionInput


def utility_section(fit_dir: Path, out_dir: Path) -> list[str]:
    """Markdown for the ``fit_utility`` stage (spec §13.1): the gold-free utility's out-of-fold three-class agreement
    next to the majority-class baseline and the oracle (ΔSePer's own class, agreement 1 by definition: the reference
    row), per-class recall, macro-F1, how often each class is predicted, the confusion matrix, the weights and
    ``utility_fit.png``. A ridge run adds its regression figures; a summary written before the class figures existed
    (no ``oof.majority``) is shown as it was."""
    summary = json.loads((fit_dir / "summary.json").read_text())
    if "majority" not in summary["oof"]:
        return _ridge_utility_lines(fit_dir, out_dir, summary)
    from workbench.plots import grouped_bars

    oof, label = summary["oof"], summary["label"]
    classifier = summary.get("model") == "classifier"
    classes = list(oof["confusion"])
    majority = oof["majority"]
    grouped_bars(
        out_dir / "utility_fit.png",
        classes,
        {
            f"label ({label})": [oof["labels"][c] for c in classes],
            "gold-free, out of fold": [oof["predicted"][c] for c in classes],
            "majority baseline": [majority["predicted"][c] for c in classes],
        },
        title="Utility classes: labels and predictions",
        ylabel="pairs",
        ylim=None,
    )
    if classifier:
        what = (
            f"Multinomial logistic regression (balanced class weights, l2 = {summary['l2']}) from gold-free features "
            "of the (question, top-k context) pair to the utility class; per-class decision biases set on a held-out "
            f"{summary.get('dev_fraction', 0)} of each training split ({_biases(summary.get('biases', {}))}). "
            "D²-RAG decodes with the predicted class."
        )
    else:
        what = (
            f"Ridge regression (l2 = {summary['l2']}) from gold-free features of the (question, top-k context) pair "
            f"to `{label}`, cut at τ_neg / τ_pos by D²-RAG."
        )

    def row(name: str, figures: dict[str, Any]) -> str:
        recall = " | ".join(fmt(figures["recall"][c], 2) for c in classes)
        predicted = " / ".join(str(figures["predicted"][c]) for c in classes)
        return f"| {name} | {figures['class_agreement']:.3f} | {figures['macro_f1']:.3f} | {recall} | {predicted} |"

    oracle = {
        "class_agreement": 1.0,
        "macro_f1": 1.0,
        "recall": {c: 1.0 if oof["labels"][c] else None for c in classes},
        "predicted": oof["labels"],
    }
    lines = [
        "## D²-RAG utility predictor",
        "",
        f"{what} Trained on {summary['usable']} `{summary['split']}` pairs (label mean {summary['label_mean']:.3f}, "
        f"std {summary['label_std']:.3f}); classes are `{label}` cut at τ_neg = {oof['tau_neg']} / τ_pos = "
        f"{oof['tau_pos']}. Figures are out of fold ({summary['folds']} folds; the majority baseline predicts each "
        "fold's commonest class of the other folds). The oracle is the label itself (needs the gold answer), shown "
        "as the reference.",
        "",
        "| utility | three-class agreement | macro-F1 | "
        + " | ".join(f"recall {c}" for c in classes)
        + " | predicted "
        + " / ".join(classes)
        + " |",
        "|---|---:|---:|" + "---:|" * len(classes) + "---:|",
        row("gold-free " + ("classifier" if classifier else "ridge, cut"), oof),
        row(f"majority class (`{'`, `'.join(majority['classes'])}`)", majority),
        row("oracle ΔSePer (reference)", oracle),
        "",
    ]
    if not classifier:
        lines += [
            "| R² | MAE | MAE of predicting the mean | Spearman ρ |",
            "|---:|---:|---:|---:|",
            f"| {oof['r2']:.3f} | {oof['mae']:.3f} | {oof['mean_baseline_mae']:.3f} | {oof['spearman']:.3f} |",
            "",
        ]
    lines += [
        "Rows: the label's class, columns: the predicted class (out of fold):",
        "",
        *markdown_table(
            ["label \\ predicted", *classes], [[a, *(oof["confusion"][a][b] for b in classes)] for a in classes]
        ),
        "",
        _weight_lines(summary["coefficients"]),
        "",
        "![utility classes](utility_fit.png)",
        "",
    ]
    return lines


def _biases(biases: dict[str, float]) -> str:
    shifted = [f"{c} {b:+.1f}" for c, b in biases.items() if b]
    return "biases " + ", ".join(shifted) if shifted else "no bias chosen"


def _weight_lines(coefficients: dict[str, Any]) -> str:
    """One sentence of standardised weights (ridge: per feature; classifier: the largest three per class)."""
    if all(isinstance(v, dict) for v in coefficients.values()):
        parts = []
        for klass, weights in coefficients.items():
            top = sorted(((n, w) for n, w in weights.items() if n != "(intercept)"), key=lambda kv: -abs(kv[1]))[:3]
            parts.append(f"{klass}: " + ", ".join(f"`{n}` {w:+.3f}" for n, w in top))
        return "Largest standardised weights per class — " + "; ".join(parts) + "."
    weights = sorted(coefficients.items(), key=lambda kv: -abs(kv[1]))
    return "Standardised weights: " + ", ".join(f"`{name}` {value:+.3f}" for name, value in weights) + "."


def _ridge_utility_lines(fit_dir: Path, out_dir: Path, summary: dict[str, Any]) -> list[str]:
    """The section of a ridge summary written before the class figures (no ``oof.majority``)."""
    import datasets

    from workbench.plots import scatter_with_thresholds

    oof = summary["oof"]
    pairs = datasets.load_from_disk(str(fit_dir / "pairs"))
    label = summary["label"]
    keep = [i for i, v in enumerate(pairs["oof_prediction"]) if v == v]  # NaN labels have no prediction
    scatter_with_thresholds(
        out_dir / "utility_fit.png",
        [pairs[label][i] for i in keep],
        [pairs["oof_prediction"][i] for i in keep],
        title="Utility predictor, out of fold",
        xlabel=f"{label} (gold-dependent label)",
        ylabel="predicted (gold-free)",
        thresholds=(oof["tau_neg"], oof["tau_pos"]),
    )
    classes = list(oof["confusion"])
    per_class = [sum(oof["confusion"][a].values()) for a in classes]
    majority = max(per_class) / max(1, sum(per_class))  # agreement of always predicting the commonest label class
    return [
        "## D²-RAG utility predictor",
        "",
        f"Ridge regression (l2 = {summary['l2']}) from gold-free features of the (question, top-k context) pair to "
        f"`{label}`, trained on {summary['usable']} `{summary['split']}` pairs (label mean "
        f"{summary['label_mean']:.3f}, std {summary['label_std']:.3f}). Quality is out of fold "
        f"({summary['folds']} folds):",
        "",
        "| R² | MAE | MAE of predicting the mean | Spearman ρ | class agreement | agreement of the commonest class |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {oof['r2']:.3f} | {oof['mae']:.3f} | {oof['mean_baseline_mae']:.3f} | {oof['spearman']:.3f} "
        f"| {oof['class_agreement']:.3f} | {majority:.3f} |",
        "",
        f"Classes at D²-RAG's τ_neg = {oof['tau_neg']} / τ_pos = {oof['tau_pos']} (rows: the label's class, "
        "columns: the predicted class):",
        "",
        "| label \\ predicted | " + " | ".join(classes) + " |",
        "|---|" + "---:|" * len(classes),
        *[f"| {a} | " + " | ".join(str(oof["confusion"][a][b]) for b in classes) + " |" for a in classes],
        "",
        _weight_lines(summary["coefficients"]),
        "",
        "![utility fit](utility_fit.png)",
        "",
    ]


def section(view: SectionInput) -> Section:
    """The ``fit_utility`` stage's section of the run's report (:func:`utility_section`)."""
    return Section(utility_section(view.stage_dir, view.out_dir))
