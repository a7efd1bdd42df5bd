"""Report section for the ``classify`` stage: the retrieval-decision classifiers against the best single feature, the
routing table, the router the run picked (:mod:`workbench.stages.classify.router_report`) and the decision the run
ships."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from workbench.classify.weight_flags import describe_flags, flag_weights
from workbench.core.formatting import fmt, markdown_table
from workbench.methods.learned import ROUTER_NAMES
from workbench.metrics.bootstrap import N_RESAMPLES, bootstrap_intervals, describe
from workbench.metrics.ranking import auroc, auroc_rows
from workbench.metrics.rejection import prr
from workbench.plots import horizontal_bars, rejection_curves, roc_curves
from workbench.reports.section import Section, SectionInput
from workbench.stages.calibrate.ood_report import ood_section
from workbench.stages.classify.router_report import router_lines, shipped_lines
from workbench.stages.evaluate.report import protocol_cells


def _role_lines(selection: dict) -> list[str]:
    """Which split chose what (``selection.json``'s ``roles``; absent from runs made before it existed)."""
    roles = selection.get("roles")
    if not roles:
        return []
    names = {
        "weights": "classifier weights",
        "mlp_early_stopping": "MLP early stopping",
        "model_choice": "model choice (between the kinds)",
        "seed_choice": "seed choice",
        "tau": "classifier τ",
        "single_feature_tau": "single-feature τ",
    }
    return [*markdown_table(["what", "chosen on"], [[names.get(k, k), v] for k, v in roles.items()], "ll"), ""]


def routing_lines(classify_dir: Path, out_dir: Path) -> list[str]:
    """Markdown for the decision-classifier section and the routing table (+ its PNGs in ``out_dir``)."""

    selection = json.loads((classify_dir / "selection.json").read_text())
    routing = json.loads((classify_dir / "routing.json").read_text())
    pred = json.loads((classify_dir / "predictions.json").read_text())
    labels = np.asarray(pred["label"])
    split = routing["split"]
    lines = [
        "## Retrieval decision: classifiers and routing",
        "",
        f"Trained on {selection['train_rows']} and validated on {selection['val_rows']} questions of the fit split; "
        f"evaluated on `{split}`. Selection by mean validation PRR over seeds; chosen: "
        f"**{selection['chosen']}**. ONNX export parity (max |Δ| on `{split}`): "
        + ", ".join(f"{k} {v:.1e}" for k, v in selection["onnx_max_abs_diff"].items())
        + ".",
        "",
        *_role_lines(selection),
        "| classifier | seeds | validation PRR (mean ± std) | validation AUROC (mean ± std) | τ | retrieval rate "
        "where τ was chosen |",
        "|---|---:|---|---|---:|---:|",
    ]
    short = ROUTER_NAMES
    for kind, info in selection["kinds"].items():
        s = info["summary"][kind]
        t = selection["thresholds"][short[kind]]
        lines.append(
            f"| {kind} | {len(info['runs'])} | {fmt(s['mean_prr'])} ± {fmt(s['std_prr'])} "
            f"| {fmt(s['mean_auroc'])} ± {fmt(s['std_auroc'])} | {t['tau']:.3f} | {t['retrieval_rate']:.2f} |"
        )
    lines += [
        "",
        *routing_table_lines(routing, split),
    ]
    features = pred["features"]
    best = max(features, key=lambda f: _auroc(features[f], labels))
    lines += classifier_vs_feature_lines(pred, labels, best, split)
    curves = {k: pred[k] for k in ROUTER_NAMES.values() if k in pred}
    curves[f"{best} (best feature)"] = features[best]
    roc_curves(out_dir / "roc.png", curves, labels, title=f"ROC for closed-book correctness on {split}")
    rejection_curves(out_dir / "rejection.png", curves, labels, title=f"Prediction-rejection curves on {split}")
    lines += ["", "![ROC](roc.png) ![rejection](rejection.png)", ""]
    if "lr_weights" in pred:
        lines += lr_weight_lines(pred, labels, split, out_dir)

    return lines + router_lines(classify_dir, out_dir)


def lr_weight_lines(pred: dict[str, Any], labels: np.ndarray, split: str, out_dir: Path) -> list[str]:
    """Markdown for the LR weights plot (``lr_weights.png``), after a bold paragraph naming each weight whose sign the
    feature's own AUROC on ``split`` contradicts (:func:`workbench.classify.weight_flags.flag_weights`); the plot
    marks those features too."""

    flags = flag_weights(pred["lr_weights"], pred["features"], labels)
    relabel = {flag.feature: flag.label(split) for flag in flags}
    horizontal_bars(
        out_dir / "lr_weights.png",
        {relabel.get(name, name): weight for name, weight in pred["lr_weights"].items()},
        title="Logistic regression weights (standardised calibrated features)",
        xlabel="weight",
    )
    return [*([describe_flags(flags, split), ""] if flags else []), "![LR weights](lr_weights.png)", ""]


def routing_table_lines(routing: dict, split: str) -> list[str]:
    """The routing table: each router's routed scores, retrieval rate and cost per question. A table with a cost
    ``unit`` charges each router the stats of its own features; an older one charged every router the whole
    collection (said so)."""
    unit = routing.get("unit")
    intro = (
        f"Routing on `{split}`: retrieve when P(correct) < τ. Scores are of the routed answer (the RAG answer when "
        "retrieved, else the closed-book one). Oracle knows which closed-book answers are wrong (gold-dependent: an "
        "upper bound). "
    )
    if unit is None:
        return [
            intro + "Feature routers pay for the whole feature collection (all collected features; it includes the "
            "closed-book answer) plus one RAG answer when they retrieve.",
            "",
            DECISION_ACCURACY_NOTE,
            "",
            "| router | EM | token F1 | containment | decision accuracy | retrieval rate | RC / q | LMC / q "
            "| tokens / q |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            *(
                f"| {_bold(row['router'])} | {row['em']:.3f} | {row['f1']:.3f} | {row['contains']:.3f} "
                f"| {protocol_cells(row)} | {row['lm_calls']:.2f} "
                f"| {row['tokens']:.0f} |"
                for row in routing["rows"]
            ),
        ]
    lines = [
        intro + "Each router pays for the stats its own features need (the greedy closed-book answer, which every "
        "router gives when it does not retrieve, plus e.g. the samples and their NLI pairs — each shared piece once, "
        "as measured per stat by `collect`) and one retrieval (retriever + answer with passages) per retrieved "
        "question; Always-RAG pays the retrieval only. LR / MLP read every collected feature; **Router** is the "
        f"router the search picked (below). Cost unit for picking: **{unit}**.",
        "",
        DECISION_ACCURACY_NOTE,
        "",
        "| router | EM | token F1 | containment | decision accuracy | retrieval rate | RC / q | LMC / q | tokens / q "
        "| NLI pairs / q | seconds / q |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in routing["rows"]:
        lines.append(
            f"| {_bold(row['router'])} | {row['em']:.3f} | {row['f1']:.3f} | {row['contains']:.3f} "
            f"| {protocol_cells(row)} | {row['lm_calls']:.2f} "
            f"| {row['tokens']:.0f} | {row['nli_pairs']:.1f} | {row['seconds']:.3f} |"
        )
    return lines


DECISION_ACCURACY_NOTE = (
    'Decision accuracy: the share of questions whose retrieve decision is right, the label being "the closed-book '
    "answer is wrong\" (containment); containment is AdaRAGUE's In-Accuracy (the gold answer in the output); RC: "
    "retrieval calls per question; LMC: LM calls per question, the features' own calls included."
)


def _bold(name: str) -> str:
    return f"**{name}**" if name in (*ROUTER_NAMES.values(), "Router") else name


def paired_bootstrap(
    scores: dict[str, list[float]],
    labels: np.ndarray,
    reference: str,
    *,
    draws: int = N_RESAMPLES,
    seed: int = 0,
) -> dict[str, dict[str, tuple[float, float]]]:
    """90% BCa intervals of AUROC and PRR for every scorer in ``scores`` and of each one's difference to
    ``reference``, over the same ``draws`` bootstrap resamples of the questions (paired: the difference's interval
    accounts for the scorers ranking the same questions), by :func:`workbench.metrics.bootstrap.bootstrap_intervals`.
    Resamples with one class only make the figures NaN: the interval is then the percentile one of the defined
    resamples, and NaN when more than half were undefined (see that module)."""

    y = np.asarray(labels, dtype=float)
    arrays = {name: np.asarray(values, dtype=float) for name, values in scores.items()}
    figures = ("auroc", "prr", "d_auroc", "d_prr")

    def prr_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        flat_a, flat_b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
        return np.array([prr(r, q) for r, q in zip(flat_a, flat_b, strict=True)]).reshape(a.shape[:-1])

    def statistic(idx: np.ndarray) -> np.ndarray:
        values = {name: (auroc_rows(a[idx], y[idx]), prr_rows(a[idx], y[idx])) for name, a in arrays.items()}
        ref = values[reference]
        return np.stack([v for a_v, p_v in values.values() for v in (a_v, p_v, a_v - ref[0], p_v - ref[1])])

    intervals = iter(bootstrap_intervals(statistic, y.size, n_resamples=draws, seed=seed, vectorized=True))
    return {name: {m: next(intervals).as_tuple() for m in figures} for name in arrays}


def classifier_vs_feature_lines(pred: dict[str, Any], labels: np.ndarray, best: str, split: str) -> list[str]:
    """Markdown: do the classifiers (LR, MLP, k-NN, tree) over the calibrated features rank correctness better than
    the best single feature?"""

    scores = {k: pred[k] for k in ROUTER_NAMES.values() if k in pred}
    if not scores:
        return []
    scores[best] = pred["features"][best]
    intervals = paired_bootstrap(scores, labels, best)

    def cell(value: float, bounds: tuple[float, float]) -> str:
        return f"{fmt(value)} ({fmt(bounds[0], 2)} – {fmt(bounds[1], 2)})"

    lines = [
        "",
        f"Classifiers against the best single calibrated feature on `{split}` (`{best}`, picked on this split: "
        f"optimistic for it), with {describe()}, the same resamples for every scorer; a difference whose interval "
        "excludes 0 is real.",
        "",
        f"| scorer | AUROC | PRR | AUROC − {best} | PRR − {best} |",
        "|---|---|---|---|---|",
    ]
    y = np.asarray(labels, dtype=float)
    for name, values in scores.items():
        a_value, p_value = auroc(values, y), prr(values, y)
        b_auroc, b_prr = auroc(scores[best], y), prr(scores[best], y)
        got = intervals[name]
        difference = (
            ["–", "–"]
            if name == best
            else [cell(a_value - b_auroc, got["d_auroc"]), cell(p_value - b_prr, got["d_prr"])]
        )
        lines.append(
            f"| {name} | {cell(a_value, got['auroc'])} | {cell(p_value, got['prr'])} | " + " | ".join(difference) + " |"
        )
    return lines


def _auroc(values: list[float], labels: np.ndarray) -> float:
    value = auroc(values, labels)
    return -1.0 if np.isnan(value) else value


def section(view: SectionInput) -> Section:
    """The ``classify`` stage's section of the run's report: :func:`routing_lines`, the decision the run ships as its
    bundle records it (:func:`~workbench.stages.classify.router_report.shipped_lines`), then the calibrate stage's
    out-of-distribution check when the run has it (it closes the calibration and routing sections)."""
    calibrate_dir = view.stage_output("calibrate")
    lines = routing_lines(view.stage_dir, view.out_dir)
    lines += shipped_lines(view.stage_output("export"), view.config, view.stage_output, view.out_dir)
    return Section(lines + ood_section(calibrate_dir))
