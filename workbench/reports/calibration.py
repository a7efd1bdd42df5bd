"""Report sections for the ``calibrate`` and ``classify`` stages: calibration quality and the routing table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from workbench.calibration.choice import CalibratorChoice
from workbench.classify.weight_flags import describe_flags, flag_weights
from workbench.core.formatting import fmt, markdown_table
from workbench.metrics.bootstrap import N_RESAMPLES, bootstrap_intervals, describe
from workbench.metrics.ranking import auroc, auroc_rows
from workbench.metrics.rejection import prr, spearman
from workbench.plots import grouped_bars, heatmap, horizontal_bars, rejection_curves, reliability_grid, roc_curves
from workbench.reports.router import router_lines


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


def _role_lines(selection: dict) -> list[str]:
    """Which split chose what (``selection.json``'s ``roles``; absent from runs made before it existed)."""
    roles = selection.get("roles")
    if not roles:
        return []
    names = {
        "weights": "classifier weights",
        "mlp_early_stopping": "MLP early stopping",
        "model_choice": "model choice (LR vs MLP)",
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
    short = {"logistic": "LR", "mlp": "MLP"}
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
    curves = {k: pred[k] for k in ("LR", "MLP") if k in pred}
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
            "| router | EM | token F1 | containment | retrieval rate | LM calls / q | tokens / q |",
            "|---|---:|---:|---:|---:|---:|---:|",
            *(
                f"| {_bold(row['router'])} | {row['em']:.3f} | {row['f1']:.3f} | {row['contains']:.3f} "
                f"| {row['retrieval_rate']:.2f} | {row['lm_calls']:.2f} | {row['tokens']:.0f} |"
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
        "| router | EM | token F1 | containment | retrieval rate | LM calls / q | tokens / q | NLI pairs / q "
        "| seconds / q |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in routing["rows"]:
        lines.append(
            f"| {_bold(row['router'])} | {row['em']:.3f} | {row['f1']:.3f} | {row['contains']:.3f} "
            f"| {row['retrieval_rate']:.2f} | {row['lm_calls']:.2f} | {row['tokens']:.0f} | {row['nli_pairs']:.1f} "
            f"| {row['seconds']:.3f} |"
        )
    return lines


def _bold(name: str) -> str:
    return f"**{name}**" if name in ("LR", "MLP", "Router") else name


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
    """Markdown: do LR / MLP over the calibrated features rank correctness better than the best single feature?"""

    scores = {k: pred[k] for k in ("LR", "MLP") if k in pred}
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


def calibration_sections(calibrate_dir: Path | None, classify_dir: Path | None, out_dir: Path) -> list[str]:
    """The calibration section, then the routing section, for whichever of the two stages the run has."""
    lines: list[str] = []
    if calibrate_dir is not None:
        lines += calibration_lines(calibrate_dir, out_dir)[0]
    if classify_dir is not None:
        lines += routing_lines(classify_dir, out_dir)
    return lines
