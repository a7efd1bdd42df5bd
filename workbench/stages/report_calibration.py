"""Report sections for the ``calibrate`` and ``classify`` stages: calibration quality and the routing table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


def _f(value: Any, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _minmax(values: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Raw scores mapped to [0, 1] by the fit split's range (the 'before calibration' probabilities)."""
    lo, hi = float(np.min(reference)), float(np.max(reference))
    return np.clip((values - lo) / (hi - lo), 0.0, 1.0) if hi > lo else np.full(values.shape, 0.5)


def calibration_lines(calibrate_dir: Path, out_dir: Path) -> tuple[list[str], str]:
    """Markdown for the calibration section (+ its PNGs in ``out_dir``); also returns the evaluation split."""
    from workbench.metrics.rejection import spearman
    from workbench.plots import grouped_bars, heatmap, reliability_grid

    meta = json.loads((calibrate_dir / "summary.json").read_text())
    metrics = json.loads((calibrate_dir / "metrics.json").read_text())
    data = json.loads((calibrate_dir / "calibrated.json").read_text())
    features, fit = meta["features"], meta["fit_split"]
    split = next((s for s in data if s != fit), fit)
    labels = np.asarray(data[split]["label"])
    bad = meta["nan"]["bad_values"]
    n_bad = sum(sum(v.values()) for v in bad.values())
    lines = [
        "## Calibration",
        "",
        f"`{meta['kind']}` calibrators for `{meta['label']}` fitted on `{fit}` (out of fold there: each question "
        f"calibrated by a calibrator that never saw it) and applied to `{split}` ({len(labels)} questions, "
        f"{int(labels.sum())} positive). NaN / inf values: {n_bad}, policy `{meta['nan']['policy']}`"
        + (f" ({json.dumps(bad)})" if n_bad else "")
        + ". Ranking metrics before and after calibration — a calibrator may merge close scores into one step, "
        "which can only lower AUROC / PRR; ECE and Brier are for the calibrated probabilities.",
        "",
        "| feature | AUROC before → after | PRR before → after | AURAC after | ECE after | Brier after |",
        "|---|---|---|---:|---:|---:|",
    ]
    for name in features:
        m = metrics[name][split]
        b, a = m["before"], m["after"]
        lines.append(
            f"| {name} | {_f(b['auroc'])} → {_f(a['auroc'])} | {_f(b['prr'])} → {_f(a['prr'])} | {_f(a['aurac'])} "
            f"| {_f(a['ece'])} | {_f(a['brier'])} |"
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


def routing_lines(classify_dir: Path, out_dir: Path) -> list[str]:
    """Markdown for the decision-classifier section and the routing table (+ its PNGs in ``out_dir``)."""
    from workbench.plots import horizontal_bars, rejection_curves, roc_curves

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
        "| classifier | seeds | validation PRR (mean ± std) | validation AUROC (mean ± std) | τ | val retrieval rate |",
        "|---|---:|---|---|---:|---:|",
    ]
    short = {"logistic": "LR", "mlp": "MLP"}
    for kind, info in selection["kinds"].items():
        s = info["summary"][kind]
        t = selection["thresholds"][short[kind]]
        lines.append(
            f"| {kind} | {len(info['runs'])} | {_f(s['mean_prr'])} ± {_f(s['std_prr'])} "
            f"| {_f(s['mean_auroc'])} ± {_f(s['std_auroc'])} | {t['tau']:.3f} | {t['retrieval_rate']:.2f} |"
        )
    lines += [
        "",
        f"Routing on `{split}`: retrieve when P(correct) < τ. Scores are of the routed answer (the RAG answer when "
        "retrieved, else the closed-book one). Oracle knows which closed-book answers are wrong (gold-dependent: an "
        "upper bound). Feature routers pay for the whole feature collection (all collected features; it includes the "
        "closed-book answer) plus one RAG answer when they retrieve.",
        "",
        "| router | EM | token F1 | containment | retrieval rate | LM calls / q | tokens / q |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in routing["rows"]:
        name = f"**{row['router']}**" if row["router"] in ("LR", "MLP") else row["router"]
        lines.append(
            f"| {name} | {row['em']:.3f} | {row['f1']:.3f} | {row['contains']:.3f} | {row['retrieval_rate']:.2f} "
            f"| {row['lm_calls']:.2f} | {row['tokens']:.0f} |"
        )
    features = pred["features"]
    best = max(features, key=lambda f: _auroc(features[f], labels))
    curves = {k: pred[k] for k in ("LR", "MLP") if k in pred}
    curves[f"{best} (best feature)"] = features[best]
    roc_curves(out_dir / "roc.png", curves, labels, title=f"ROC for closed-book correctness on {split}")
    rejection_curves(out_dir / "rejection.png", curves, labels, title=f"Prediction-rejection curves on {split}")
    lines += ["", "![ROC](roc.png) ![rejection](rejection.png)", ""]
    if "lr_weights" in pred:
        horizontal_bars(
            out_dir / "lr_weights.png",
            pred["lr_weights"],
            title="Logistic regression weights (standardised calibrated features)",
            xlabel="weight",
        )
        lines += ["![LR weights](lr_weights.png)", ""]
    return lines


def _auroc(values: list[float], labels: np.ndarray) -> float:
    from workbench.metrics.ranking import auroc

    value = auroc(values, labels)
    return -1.0 if np.isnan(value) else value


def calibration_sections(calibrate_dir: Path | None, classify_dir: Path | None, out_dir: Path) -> list[str]:
    """The calibration section, then the routing section, for whichever of the two stages the run has."""
    lines: list[str] = []
    if calibrate_dir is not None:
        lines += calibration_lines(calibrate_dir, out_dir)[0]
    if classify_dir is not None:
        lines += routing_lines(classify_dir, out_dir)
    return lines
