"""Stage ``calibrate``: one calibrator per feature, fitted on the collected calibration split, applied everywhere.

Reads the ``collect`` stage's per-split datasets. For each selected feature (oriented: higher = more certain):

* its calibrator is **chosen** on the fit split (``calibrate.kind: auto``, the default: among
  ``calibrate.candidates`` — isotonic, centered isotonic, Platt, beta — the kind with the lowest out-of-fold log loss
  that keeps the raw score's ranking, :func:`workbench.calibration.choice.choose_calibrator`), or named by the recipe
  and measured the same way; the record (losses, out-of-fold AUROC against the raw score's, the rule that chose, and
  whether ranking is lost) goes into ``calibrators.json`` and ``summary.json``;
* the **fit split** (``calibrate.fit_split``, default ``calib``) gets out-of-fold calibrated values
  (:func:`workbench.calibration.oof.out_of_fold_predict`: each question is calibrated by a calibrator that never saw
  it), so classifiers trained on them are not fed leaked labels;
* every other split gets the values of one calibrator fitted on the whole fit split — the calibrator saved in
  ``calibrators.json`` (a :class:`~workbench.calibration.calibrator_set.CalibratorSet`: JSON breakpoints /
  coefficients and the fit split's median and finite range of every raw feature; no pickle) for the evaluation
  stage and bundles.

NaN and ±inf feature values follow ``calibrate.nan_policy``: ``impute`` replaces NaN with the fit split's median of
that feature and +inf / −inf with the top / bottom of the fit split's finite range (an infinite value is an extreme,
not a missing one: the DTR NLL of an empty answer), ``drop`` removes the question from that split (for every
feature); either way they are counted in ``summary.json``. Inference (the evaluate stage, the runtime) cannot drop a
question: it imputes with the medians and ranges ``calibrators.json`` stores under either policy, so under ``drop``
the calibrators and classifier never saw an imputed row that inference feeds them (docs/calibration.md).
Ranking metrics (AUROC, PRR, AURAC) of every feature are measured before and after calibration on every split, so a
calibrator that damages ranking shows up; ECE and Brier after calibration.

Outputs: ``calibrators.json``, ``calibrated.json`` (per split: ids, label, calibrated features, and the QA / cost
columns the routing table needs), ``metrics.json``, ``summary.json`` (the settings: kind, label, fit split, features,
NaN counts; and rows per split), and the OOD flag (:func:`write_ood`, docs/ood.md): ``ood.json`` +
``ood.safetensors`` (the fit split's :class:`~workbench.calibration.ood.OODProfile`: question embeddings, forms and
lengths, the threshold calibrated to ``calibrate.ood_fpr`` on ``calibrate.ood_split``), ``ood_rates.json`` (its flag
rate on each measured split, with a Wilson interval), ``ood_reference.json`` (its rate on every fit question, each
against the others: export's drift reference of the flag), ``ood_checks.json`` (each collected row's failed checks)
and ``ood_features.json`` (the features-only detector measured beside the flag, not part of it).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from workbench.calibration.calibrator_set import CalibratorSet, impute_value
from workbench.calibration.choice import CalibratorChoice, choose_calibrator
from workbench.calibration.ood import OODProfile
from workbench.calibration.ood_features import FeatureNovelty
from workbench.calibration.ood_rates import flag_summary
from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError, DataError
from workbench.data.article_splits import OOD_SPLIT
from workbench.methods.learned import save_learned
from workbench.metrics.calibration import brier, ece
from workbench.metrics.ranking import auroc
from workbench.metrics.rejection import aurac, prr
from workbench.stages.context import StageContext

CARRIED = (
    "correct_em",
    "correct_f1",
    "correct_contains",
    "rag_em",
    "rag_f1",
    "rag_contains",
    "closed_prompt_tokens",
    "closed_new_tokens",
    "rag_prompt_tokens",
    "rag_new_tokens",
    "lm_calls",
    "prefill_tokens",
    "decoded_tokens",
    "scored_tokens",
    "nli_pairs",
    "seconds",
    "delta_seper_s",
    "delta_seper_h",
)
"""Columns copied from the collection next to the calibrated features (labels, QA scores and costs for routing)."""


def evaluation_split(collected: Any, fit_split: str, order: Any = ()) -> str:
    """The split the calibration, the routing table and the router are measured on: the first split of ``order``
    (the recipe's ``collect.splits``) that was collected and is not the fit split — e.g. ``test`` for
    ``[calib, test, ood]`` — else the first other collected split in name order, else the fit split itself."""
    names = list(collected)
    for split in [*order, *sorted(names)]:
        if split in names and split != fit_split:
            return split
    return fit_split


def load_collection(collect_dir: Path) -> tuple[dict[str, list[dict]], dict[str, Any]]:
    """``({split: rows}, summary)`` of a ``collect`` output; DataError when it is not one."""
    import datasets

    try:
        summary = json.loads((collect_dir / "summary.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        raise DataError("not a collect output (no readable summary.json)", str(collect_dir)) from None
    rows = {}
    for split in summary["splits"]:
        path = collect_dir / split
        rows[split] = datasets.load_from_disk(str(path)).to_list() if path.exists() else []
    return rows, summary


def binary_labels(rows: list[dict], label: str, threshold: float, where: str) -> np.ndarray:
    """``label >= threshold`` as 0/1 floats; DataError when the column is missing."""
    if rows and label not in rows[0]:
        raise DataError(f"label column {label!r} is not in the collection (has: {', '.join(rows[0])})", where)
    return np.asarray([float(r[label] >= threshold) for r in rows], dtype=float)


def feature_matrix(rows: list[dict], features: list[str], where: str) -> np.ndarray:
    """(rows, features) float matrix; DataError naming the first selected feature the rows lack."""
    if rows:
        missing = [f for f in features if f not in rows[0]]
        if missing:
            raise DataError(f"the collection has no feature column(s) {missing}", where)
    return np.asarray([[float(r[f]) for f in features] for r in rows], dtype=float).reshape(len(rows), len(features))


def apply_nan_policy(
    matrices: dict[str, np.ndarray], fit_split: str, policy: str, features: list[str]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Any]]:
    """``(matrices, kept row masks, counts)``: non-finite values imputed, or their rows dropped.

    Imputing follows :func:`~workbench.calibration.calibrator_set.impute_value`: NaN → the fit split's median of the
    feature, ±inf → the end of its finite range on that side. ``counts["medians"]`` and ``counts["ranges"]`` hold
    those fit-split values: what inference imputes with."""

    if policy not in ("impute", "drop"):
        raise ConfigError(f"nan_policy must be impute or drop, got {policy!r}", "calibrate.nan_policy")
    fit = matrices[fit_split]
    medians = np.array([np.median(col[np.isfinite(col)]) if np.isfinite(col).any() else np.nan for col in fit.T])
    for name, value in zip(features, medians, strict=True):
        if math.isnan(value):
            raise DataError(f"feature {name!r} has no finite value on the fit split", "calibrate")
    counts: dict[str, Any] = {"policy": policy, "bad_values": {}, "dropped_rows": {}}
    counts["medians"] = {name: float(value) for name, value in zip(features, medians, strict=True)}
    counts["ranges"] = {
        name: (float(col[np.isfinite(col)].min()), float(col[np.isfinite(col)].max()))
        for name, col in zip(features, fit.T, strict=True)
    }
    out, keep = {}, {}
    for split, matrix in matrices.items():
        bad = ~np.isfinite(matrix)
        counts["bad_values"][split] = {f: int(n) for f, n in zip(features, bad.sum(axis=0), strict=True) if n}
        if policy == "impute":
            fixed = matrix.copy()
            for j, name in enumerate(features):
                rows = np.flatnonzero(bad[:, j])
                for i in rows:
                    fixed[i, j] = impute_value(matrix[i, j], medians[j], counts["ranges"][name])
            keep[split] = np.ones(matrix.shape[0], dtype=bool)
        else:
            keep[split] = ~bad.any(axis=1)
            fixed = matrix[keep[split]]
        counts["dropped_rows"][split] = int((~keep[split]).sum())
        out[split] = fixed
    return out, keep, counts


def ranking_metrics(confidence: np.ndarray, labels: np.ndarray) -> dict[str, float | None]:
    """AUROC, PRR and AURAC of a confidence score (None where undefined)."""

    values = {"auroc": auroc(confidence, labels), "prr": prr(confidence, labels), "aurac": aurac(confidence, labels)}
    return {k: (None if math.isnan(v) else round(float(v), 4)) for k, v in values.items()}


def probability_metrics(probs: np.ndarray, labels: np.ndarray) -> dict[str, float | None]:
    """ECE (10 equal-width bins) and Brier score of calibrated probabilities."""

    values = {"ece": ece(probs, labels), "brier": brier(probs, labels)}
    return {k: (None if math.isnan(v) else round(float(v), 4)) for k, v in values.items()}


def split_questions(qa: Any, split: str, limit: int | None) -> list[str]:
    """The first ``limit`` questions (None: all) of build_data's ``split``, in its order (collect's order too)."""
    questions = qa[split]["question"]
    return [str(q) for q in (questions if limit is None else questions[:limit])]


def measured_role(split: str, threshold_split: str | None) -> str:
    """What a split's OOD flag rate measures: ``threshold`` (the split that set it: in-sample), ``shift`` (wiki-qa's
    held-out topics: a detection rate) or ``in_distribution`` (held out: a false-positive rate)."""

    if split == threshold_split:
        return "threshold"
    return "shift" if split == OOD_SPLIT else "in_distribution"


def fit_ood(section: Any, qa: Any, embedder: Any, fit_split: str) -> Any:
    """The OOD flag (:class:`~workbench.calibration.ood.OODProfile`) fitted on the first ``calibrate.ood_limit``
    questions of build_data's fit split and their embeddings by the run's ``embedder``, its threshold set for
    ``calibrate.ood_fpr`` on ``calibrate.ood_split`` (null: the fit split cross-fitted). DataError naming the setting
    when the fit split has too few questions for ``ood_neighbours`` or the threshold split too few for the target."""

    fit_questions = split_questions(qa, fit_split, section.ood_limit)
    if section.ood_neighbours >= len(fit_questions):
        raise DataError(
            f"must be below the {len(fit_questions)} questions of the fit split {fit_split!r}",
            "calibrate.ood_neighbours",
        )
    held_out = None if section.ood_split is None else split_questions(qa, section.ood_split, section.ood_limit)
    try:
        return OODProfile.fit(
            fit_questions,
            embedder.encode(fit_questions),
            embedder=embedder.fingerprint,
            neighbours=section.ood_neighbours,
            target_fpr=section.ood_fpr,
            held_out=held_out,
            held_out_embeddings=None if held_out is None else embedder.encode(held_out),
            split=section.ood_split,
        )
    except DataError as exc:  # too few threshold questions for the target: the split (or the rate) must change
        hint = "raise calibrate.ood_fpr" if section.ood_split is None else "null cross-fits the fit split"
        raise DataError(f"{exc.what}; {hint}", "calibrate.ood_split") from None


def measure_ood(
    section: Any, qa: Any, embed: Any, profile: Any, detector: Any, splits: Any, clean: dict[str, np.ndarray]
) -> dict[str, Any]:
    """``ood_rates.json``: per measured split — the threshold split (in-sample) and each of ``splits`` that build_data
    made (the collected ones but the fit split, and ``ood``: ``test`` a false-positive rate, ``ood`` a detection
    rate) — its ``role`` and the flag's
    rate over its first ``calibrate.ood_limit`` build_data questions with a Wilson interval
    (:func:`~workbench.calibration.ood_rates.flag_summary`); under ``features``, where the split was collected, the
    rate of the features-only ``detector`` on its ``clean`` rows (None: not measured)."""

    rates = {}
    for split in dict.fromkeys([section.ood_split, *splits]):
        if split is None or split not in qa:
            continue
        results = profile.check_questions(split_questions(qa, split, section.ood_limit), embed)
        rates[split] = {"role": measured_role(split, section.ood_split), **flag_summary([r.checks for r in results])}
        if split in clean and detector is not None:
            rates[split]["features"] = flag_summary(detector.checks(clean[split]), names=("features",))
    return rates


def write_ood(
    ctx: StageContext,
    rows: dict[str, list[dict]],
    keep: dict[str, np.ndarray],
    clean: dict[str, np.ndarray],
    fit_split: str,
) -> str:
    """Fit the OOD flag (:func:`fit_ood`) into ``ood.json`` (+ ``ood.safetensors``) and measure it
    (:func:`measure_ood`) into ``ood_rates.json``; beside it, the detector on the uncertainty features
    (:class:`~workbench.calibration.ood_features.FeatureNovelty`, measured only, fitted on the ``clean`` fit-split
    rows: ``ood_features.json``; left out, with a log line, when they are too few for the target), and
    ``ood_checks.json``: per collected split, the failed checks of each kept row (calibrated.json's row order; the
    fit split's rows checked leave-one-out, as new questions of its distribution would be), for the report's
    per-feature table; and ``ood_reference.json``: the flag's :func:`flag_summary` over every question the profile
    was fitted on, each checked leave-one-out (``split`` names the fit split) — export's drift reference of the flag:
    the rate in-distribution traffic meets, estimated on all those questions rather than the collected rows alone.
    Returns the profile's one-line description (or why none was fitted: a collection without a ``question``
    column)."""
    from workbench.data.dataset_store import load_saved_dataset_dict

    section = ctx.config.calibrate
    if "question" not in rows[fit_split][0]:
        return "no OOD profile: the collection has no question column"
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    embedder = ctx.resources.embedder()
    profile = fit_ood(section, qa, embedder, fit_split)
    save_learned(profile, ctx.out_dir / "ood.json")
    detector = None
    try:
        detector = FeatureNovelty.fit(clean[fit_split], section.ood_neighbours, section.ood_fpr)
        atomic_write_json(ctx.out_dir / "ood_features.json", detector.to_dict())
    except DataError as exc:
        ctx.log.info("calibrate: no features-only OOD detector to measure (%s)", exc.what)
    # the collected splits but the fit split, and build_data's held-out topics even when not collected: the flag
    # reads only the question, so its detection rate there costs embeddings alone
    others = [split for split in dict.fromkeys([*rows, OOD_SPLIT]) if split != fit_split]
    rates = measure_ood(section, qa, embedder.encode, profile, detector, others, clean)
    checks: dict[str, Any] = {}
    fit_questions = split_questions(qa, fit_split, section.ood_limit)  # the profile's reference rows, in order
    # in-sample (each question its own nearest neighbour, at distance 0) a fit question is flagged less often than a
    # new in-distribution one; leave-one-out it is checked as that new question would be — once, for the reference
    # and for the fit split's collected rows alike
    crossed = profile.check_questions(fit_questions, embedder.encode, own=range(len(fit_questions)))
    fitted: dict[str, Any] = {}  # each fit question's leave-one-out result (the first, if repeated)
    for question, result in zip(fit_questions, crossed, strict=True):
        fitted.setdefault(question, result)
    for split, split_rows in rows.items():
        kept = [r for r, k in zip(split_rows, keep.get(split, []), strict=True) if k]
        questions = [str(r["question"]) for r in kept]
        known = fitted if split == fit_split else {}
        new = [q for q in questions if q not in known]  # beyond calibrate.ood_limit, or another split's
        checked = dict(zip(new, profile.check_questions(new, embedder.encode), strict=True))
        results = [known[q] if q in known else checked[q] for q in questions]
        checks[split] = {"id": [str(r["id"]) for r in kept], "checks": [r.checks for r in results]}
    atomic_write_json(ctx.out_dir / "ood_rates.json", rates)
    atomic_write_json(ctx.out_dir / "ood_checks.json", checks)
    atomic_write_json(
        ctx.out_dir / "ood_reference.json", {"split": fit_split, **flag_summary([r.checks for r in crossed])}
    )
    return profile.describe()


def run(ctx: StageContext) -> dict[str, Any]:
    """Fit, apply and measure the calibrators; write the JSON outputs (and the OOD profile: :func:`write_ood`)."""

    section = ctx.config.calibrate
    rows, summary = load_collection(ctx.inputs["collect"])
    features = list(section.features or summary["features"])
    if not features:
        raise ConfigError("no features to calibrate", "calibrate.features")
    if section.fit_split not in rows or not rows[section.fit_split]:
        raise ConfigError(
            f"fit split {section.fit_split!r} was not collected (has: {', '.join(rows)})", "calibrate.fit_split"
        )
    where = str(ctx.inputs["collect"])
    raw = {split: feature_matrix(r, features, f"{where}/{split}") for split, r in rows.items() if r}
    labels = {split: binary_labels(rows[split], section.label, section.label_threshold, where) for split in raw}
    fit_labels = labels[section.fit_split]
    if len(set(fit_labels.tolist())) < 2:
        raise DataError(
            f"label {section.label!r} has one class only on the {section.fit_split} split "
            f"({int(fit_labels.sum())} of {fit_labels.size} positive)",
            "calibrate.label",
        )
    clean, keep, nan_counts = apply_nan_policy(raw, section.fit_split, section.nan_policy, features)
    labels = {split: y[keep[split]] for split, y in labels.items()}

    calibrators: dict[str, Any] = {}
    calibrated: dict[str, np.ndarray] = {split: np.empty_like(m) for split, m in clean.items()}
    metrics: dict[str, Any] = {}
    y_fit = labels[section.fit_split]
    if min(section.folds, int(y_fit.sum()), int(y_fit.size - y_fit.sum())) < 2:
        raise DataError(
            f"out-of-fold calibration needs at least 2 examples of each class on {section.fit_split}", "calibrate"
        )
    kinds = list(section.candidates) if section.kind == "auto" else [section.kind]
    for j, name in enumerate(features):
        scores = clean[section.fit_split][:, j]
        # the kind with the lowest out-of-fold log loss that keeps the raw ranking (one kind: measured, not chosen)
        calibrator, oof = choose_calibrator(
            scores, y_fit, kinds, folds=section.folds, seed=ctx.config.seed, rank_tolerance=section.rank_tolerance
        )
        calibrators[name] = calibrator
        for split, matrix in clean.items():
            calibrated[split][:, j] = oof if split == section.fit_split else calibrator.predict(matrix[:, j])
        metrics[name] = {
            split: {
                "before": ranking_metrics(clean[split][:, j], labels[split]),
                "after": {
                    **ranking_metrics(calibrated[split][:, j], labels[split]),
                    **probability_metrics(calibrated[split][:, j], labels[split]),
                },
            }
            for split in clean
        }

    out_rows: dict[str, Any] = {}
    for split, matrix in calibrated.items():
        kept = [r for r, k in zip(rows[split], keep[split], strict=True) if k]
        out_rows[split] = {
            "id": [str(r["id"]) for r in kept],
            "label": labels[split].tolist(),
            "raw": {f: clean[split][:, j].tolist() for j, f in enumerate(features)},
            "calibrated": {f: matrix[:, j].tolist() for j, f in enumerate(features)},
            "columns": {c: [float(r[c]) for r in kept] for c in CARRIED if kept and c in kept[0]},
        }
    meta = {
        "kind": section.kind,
        "candidates": kinds,
        "rank_tolerance": section.rank_tolerance,
        "choices": {f: calibrators[f].choice for f in features},
        "label": section.label,
        "label_threshold": section.label_threshold,
        "fit_split": section.fit_split,
        "eval_split": evaluation_split(out_rows, section.fit_split, ctx.config.collect.splits),
        "features": features,
        "nan": nan_counts,
    }

    calibrator_set = CalibratorSet(tuple(features), calibrators, nan_counts["medians"], nan_counts["ranges"])
    save_learned(calibrator_set, ctx.out_dir / "calibrators.json")
    ood_line = write_ood(ctx, {split: r for split, r in rows.items() if r}, keep, clean, section.fit_split)
    atomic_write_json(ctx.out_dir / "calibrated.json", out_rows)
    atomic_write_json(ctx.out_dir / "metrics.json", metrics)
    summary_rows = {s: len(v["id"]) for s, v in out_rows.items()}
    atomic_write_json(ctx.out_dir / "summary.json", {**meta, "ood": ood_line, "rows": summary_rows})
    eval_split = meta["eval_split"]
    aurocs = [metrics[f][eval_split]["after"]["auroc"] for f in features]
    best = max((a, f) for a, f in zip(aurocs, features, strict=True) if a is not None) if any(aurocs) else None
    return {
        "features": len(features),
        "calibrators": dict(Counter(calibrators[f].kind for f in features)),
        "ranking_lost": [f for f in features if CalibratorChoice.from_dict(calibrators[f].choice).ranking_lost],
        "bad_values": sum(sum(v.values()) for v in nan_counts["bad_values"].values()),
        "best_feature": None if best is None else best[1],
        "best_auroc": None if best is None else best[0],
        "ood": ood_line,
    }
