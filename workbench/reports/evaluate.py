"""Report section for the ``evaluate`` stage: the methods side by side (quality, retrieval, cost, latency)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.core.formatting import counted, fmt, markdown_table


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
        f"{summary['questions']} `{summary['split']}` question{'' if summary['questions'] == 1 else 's'} per method; every answer's trace (each step with its "
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
    return lines + d2rag_utility_lines(evaluate_dir)


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
