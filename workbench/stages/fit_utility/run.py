"""Stage ``fit_utility``: train D²-RAG's gold-free utility on ΔSePer labels (spec §13.1 [REC] ``utility_learned``).

D²-RAG's Stage 2 picks its decoding mode from the utility of the retrieved context; the paper's δ is ΔSePer, which
needs the gold answer (:mod:`workbench.methods.seper.utility`). This stage builds the runtime substitute: for the first
``fit_utility.limit`` questions of ``fit_utility.split`` it retrieves D²-RAG's context (the run's retriever, top-k,
the same context block and answering prompt as the method), labels each (question, context) pair with ΔSePer
(:func:`workbench.uncertainty.seper.delta_seper`, one sampling call and one NLI call per batch), computes the
gold-free features (:func:`workbench.methods.seper.utility.utility_inputs`), and fits on ``fit_utility.label``:

* ``model: classifier`` (default) — a :class:`~workbench.methods.seper.utility_classifier.UtilityClassifier`: balanced
  multinomial logistic regression onto the three classes (the label cut at ``fit_utility.tau_pos`` / ``tau_neg``,
  which the recipe keeps equal to D²-RAG's ``tau_pos`` / ``tau_neg``), its per-class decision biases set on a held-out
  ``dev_fraction`` of the training pairs; D²-RAG decodes with its class.
* ``model: ridge`` — the earlier :class:`~workbench.methods.seper.utility.UtilityPredictor` (regression onto
  ΔSePer, cut at τ_pos / τ_neg by D²-RAG; the summary's class figures cut at ``fit_utility.tau_pos`` / ``tau_neg``).

The features are generated as D²-RAG generates them at inference: the top ``k`` passages cut at ``passage_chars``,
greedy answers at ``max_new_tokens`` — the recipe keeps each equal to what D²-RAG uses
(:data:`workbench.stages.agreements.AGREEMENTS`).

Quality is measured out of fold (``folds``-fold cross-validation on the same pairs, each fold predicted by a model
fitted — dev split and biases included — on the other folds only): what D²-RAG acts on, the utility class, as
three-class agreement with the label's class, per-class recall, macro-F1, the confusion matrix and how often each
class is predicted (so a model that never says "noisy" shows it), next to the same figures for the majority-class
baseline (each fold predicted with the commonest class of the other folds). The ridge adds R², MAE and Spearman ρ.

Outputs: ``utility.json`` (the model fitted on every pair; read by ``evaluate`` and ``export``), ``pairs/`` (an HF
dataset: one row per pair with its features, SePer terms, out-of-fold class — and probabilities or δ prediction —
and both answers) and ``summary.json``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError
from workbench.core.logs import track
from workbench.methods.common import context_block
from workbench.methods.learned import save_learned
from workbench.methods.seper.utility import UTILITY_CLASSES, UTILITY_FEATURES, UtilityPredictor, utility_inputs
from workbench.methods.seper.utility_classifier import UtilityClassifier, class_labels, macro_f1
from workbench.metrics.rejection import spearman
from workbench.stages.context import StageContext
from workbench.stages.evaluate.run import build_tools
from workbench.stages.fit_utility.settings import validate_section
from workbench.uncertainty.seper import SeperSettings, delta_seper

CLASSES = UTILITY_CLASSES
"""The utility classes in report order (:data:`workbench.methods.seper.utility.UTILITY_CLASSES`)."""


def dropped_line(questions: int, no_passages: int, not_finite: int, label: str) -> str | None:
    """The one log line saying how many of the ``questions`` asked gave no training pair, and why: ``no_passages``
    questions retrieved nothing (no context to judge) and ``not_finite`` pairs got a ``label`` that is not a finite
    number (a SePer term could not be computed). None when nothing was dropped."""
    reasons = []
    if no_passages:
        reasons.append(f"{no_passages} question(s) retrieved no passage (no context to judge)")
    if not_finite:
        reasons.append(
            f"{not_finite} pair(s) have a {label} that is not a finite number (a SePer term could not be computed)"
        )
    if not reasons:
        return None
    kept = questions - no_passages - not_finite
    return (
        f"fit_utility: {no_passages + not_finite} of {questions} question(s) dropped, {kept} pair(s) kept: "
        + "; ".join(reasons)
    )


def fold_ids(n: int, folds: int, seed: int) -> np.ndarray:
    """Fold index (0..folds-1) per row: a seeded permutation dealt to the folds in turn (sizes differ by ≤ 1)."""
    out = np.empty(n, dtype=int)
    out[np.random.default_rng(seed).permutation(n)] = np.arange(n) % folds
    return out


def out_of_fold(
    X: np.ndarray, y: np.ndarray, folds: np.ndarray, l2: float, feature_names: tuple[str, ...] | None = None
) -> np.ndarray:
    """Each row's prediction by a :class:`UtilityPredictor` fitted on the other folds (``feature_names``: one per
    column of ``X``, default the utility features)."""

    names = feature_names or UTILITY_FEATURES
    pred = np.full(y.shape, np.nan)
    for fold in np.unique(folds):
        held = folds == fold
        pred[held] = UtilityPredictor(l2, names).fit(X[~held], y[~held]).predict(X[held])
    return pred


def out_of_fold_classes(
    X: np.ndarray, y: np.ndarray, folds: np.ndarray, build: Callable[[], Any]
) -> tuple[list[str], np.ndarray]:
    """``(classes, probabilities)`` of each row from a classifier ``build()`` fitted on the other folds' features and
    ΔSePer labels ``y`` (its dev split and biases come from those folds too); probabilities ``(n, 3)`` in
    :data:`CLASSES` order."""
    classes = [""] * len(y)
    proba = np.full((len(y), len(CLASSES)), np.nan)
    for fold in np.unique(folds):
        held = np.flatnonzero(folds == fold)
        model = build().fit(X[folds != fold], y[folds != fold])
        for i, klass in zip(held, model.predict(X[held]), strict=True):
            classes[i] = klass
        proba[held] = model.predict_proba(X[held])
    return classes, proba


def commonest(labels: Sequence[str]) -> str:
    """The most frequent class of ``labels`` (ties: neutral, then relevant, then noisy — the least intrusive mode)."""
    return max(("neutral", "relevant", "noisy"), key=lambda c: list(labels).count(c))


def majority_out_of_fold(truth: Sequence[str], folds: np.ndarray) -> list[str]:
    """The majority-class baseline out of fold: every row of a fold gets the commonest class of the other folds."""
    truth = list(truth)
    out = [""] * len(truth)
    for fold in np.unique(folds):
        klass = commonest([t for t, f in zip(truth, folds, strict=True) if f != fold])
        for i in np.flatnonzero(folds == fold):
            out[i] = klass
    return out


def class_quality(truth: Sequence[str], guess: Sequence[str]) -> dict[str, Any]:
    """Three-class figures of predicted vs label classes: ``n``, ``class_agreement`` (accuracy), ``recall`` per class
    (None for a class with no label), ``macro_f1`` (:func:`~workbench.methods.seper.utility_classifier.macro_f1`),
    ``confusion[a][b]`` (pairs of label class ``a`` predicted ``b``), ``predicted`` and ``labels`` (counts per
    class)."""

    truth, guess = list(truth), list(guess)
    confusion = {a: dict.fromkeys(CLASSES, 0) for a in CLASSES}
    for a, b in zip(truth, guess, strict=True):
        confusion[a][b] += 1
    support = {c: sum(confusion[c].values()) for c in CLASSES}
    return {
        "n": len(truth),
        "class_agreement": float(np.mean([a == b for a, b in zip(truth, guess, strict=True)])) if truth else math.nan,
        "recall": {c: confusion[c][c] / support[c] if support[c] else None for c in CLASSES},
        "macro_f1": macro_f1(truth, guess),
        "confusion": confusion,
        "predicted": {c: guess.count(c) for c in CLASSES},
        "labels": support,
    }


def regression_figures(y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """R² (against the labels' mean), MAE, the MAE of always predicting the labels' mean, Spearman ρ."""

    residual = float(np.sum((y - pred) ** 2))
    total = float(np.sum((y - y.mean()) ** 2))
    return {
        "r2": 1.0 - residual / total if total > 0 else float("nan"),
        "mae": float(np.mean(np.abs(y - pred))),
        "mean_baseline_mae": float(np.mean(np.abs(y - y.mean()))),
        "spearman": float(spearman(pred, y)) if np.ptp(y) > 0 and np.ptp(pred) > 0 else float("nan"),
    }


def regression_quality(y: np.ndarray, pred: np.ndarray, tau_pos: float, tau_neg: float) -> dict[str, Any]:
    """:func:`regression_figures` plus the :func:`class_quality` of the prediction cut at τ_pos / τ_neg, and
    ``majority_agreement``: the agreement of always predicting the labels' commonest class (in sample)."""

    truth = class_labels(y, tau_pos, tau_neg).tolist()
    guess = class_labels(pred, tau_pos, tau_neg).tolist()
    return {
        **regression_figures(y, pred),
        **class_quality(truth, guess),
        "majority_agreement": max(truth.count(c) for c in CLASSES) / len(truth),
        "tau_pos": tau_pos,
        "tau_neg": tau_neg,
    }


def oof_quality(truth: Sequence[str], guess: Sequence[str], folds: np.ndarray) -> dict[str, Any]:
    """The summary's ``oof`` block: the model's :func:`class_quality`, and under ``majority`` the same figures for
    the out-of-fold majority baseline (:func:`majority_out_of_fold`; ``classes``: the classes it predicted);
    ``majority_agreement`` / ``majority_macro_f1`` repeat the baseline's figures at the top level."""
    baseline = majority_out_of_fold(truth, folds)
    majority = {"classes": sorted(set(baseline)), **class_quality(truth, baseline)}
    return {
        **class_quality(truth, guess),
        "majority": majority,
        "majority_agreement": majority["class_agreement"],
        "majority_macro_f1": majority["macro_f1"],
    }


def fit_and_score(
    section: Any, X: np.ndarray, y: np.ndarray, seed: int, tau_pos: float, tau_neg: float
) -> tuple[Any, dict[str, list[Any]], dict[str, Any], dict[str, Any]]:
    """Fit ``section.model`` on the rows ``X`` / ΔSePer ``y`` (all finite) and score it out of fold.

    Returns ``(model fitted on every row, out-of-fold columns per row, the summary's oof block, the fitted
    parameters for the summary)``. Columns: ``oof_class`` always; ``oof_p_<class>`` (classifier) or
    ``oof_prediction`` (ridge, δ). The oof block is :func:`oof_quality` (+ :func:`regression_figures` for the
    ridge) with the τ's that cut the labels."""

    folds = fold_ids(len(y), section.folds, seed)
    truth = class_labels(y, tau_pos, tau_neg).tolist()
    if section.model == "classifier":

        def build() -> UtilityClassifier:
            return UtilityClassifier(
                section.l2, tau_pos=tau_pos, tau_neg=tau_neg, dev_fraction=section.dev_fraction, seed=seed
            )

        guess, proba = out_of_fold_classes(X, y, folds, build)
        columns: dict[str, list[Any]] = {f"oof_p_{c}": [float(v) for v in proba[:, k]] for k, c in enumerate(CLASSES)}
        model: Any = build().fit(X, y)
        extra: dict[str, Any] = {}
        fitted = {
            "coefficients": model.weights(),
            "biases": dict(zip(CLASSES, (float(b) for b in model.bias_), strict=True)),
            "dev_fraction": section.dev_fraction,
        }
    else:
        pred = out_of_fold(X, y, folds, section.l2)
        guess = class_labels(pred, tau_pos, tau_neg).tolist()
        columns = {"oof_prediction": [float(v) for v in pred]}
        model = UtilityPredictor(section.l2).fit(X, y)
        extra = regression_figures(y, pred)
        fitted = {"coefficients": dict(zip(UTILITY_FEATURES, (float(c) for c in model.coef_), strict=True))}
    columns["oof_class"] = list(guess)
    quality = {**oof_quality(truth, guess, folds), **extra, "tau_pos": tau_pos, "tau_neg": tau_neg}
    return model, columns, quality, fitted


def run(ctx: StageContext) -> dict[str, Any]:
    """Label (question, context) pairs with ΔSePer, compute gold-free features, fit and save the utility model
    (``fit_utility.model``), and write its out-of-fold figures next to the majority baseline's."""
    import datasets

    from workbench.data.dataset_store import load_saved_dataset_dict

    section = ctx.config.fit_utility
    validate_section(section)
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    if section.split not in qa:
        raise ConfigError(f"split {section.split!r} not in the dataset (has: {', '.join(qa)})", "fit_utility.split")
    rows = qa[section.split]
    rows = list(rows.select(range(min(section.limit, len(rows))))) if section.limit is not None else list(rows)
    if len(rows) < section.folds:
        raise ConfigError(f"{len(rows)} questions in the split, fewer than folds={section.folds}", "fit_utility")
    corpus = datasets.load_from_disk(str(ctx.inputs["build_data"] / "corpus"))
    tools = build_tools(ctx, corpus, passage_chars=section.passage_chars, max_new_tokens=section.max_new_tokens)
    seper = SeperSettings(
        samples=section.samples,
        temperature=section.temperature,
        max_new_tokens=section.max_new_tokens,
        seed=ctx.config.seed,
    )
    records: list[dict[str, Any]] = []
    skipped = 0
    batches = [rows[i : i + section.batch_questions] for i in range(0, len(rows), section.batch_questions)]
    for batch in track(batches, "fit_utility (ΔSePer labels + features)", total=len(batches)):
        found = tools.search([str(r["question"]) for r in batch], section.k)
        kept = [(r, p) for r, p in zip(batch, found, strict=True) if p]
        skipped += len(batch) - len(kept)  # nothing retrieved: no context to judge
        if not kept:
            continue
        examples = [{"question": str(r["question"]), "answers": [str(a) for a in r["answers"]]} for r, _ in kept]
        contexts = [context_block(p, tools.passage_chars) for _, p in kept]
        labels = delta_seper(examples, contexts, generator=tools.generator, judge=tools.judge, settings=seper)
        inputs = utility_inputs(
            tools, [e["question"] for e in examples], contexts, [[x.score for x in p] for _, p in kept]
        )
        for j, ((row, passages), label) in enumerate(zip(kept, labels, strict=True)):
            records.append(
                {
                    "id": str(row["id"]),
                    "question": str(row["question"]),
                    "answers": [str(a) for a in row["answers"]],
                    "retrieved_ids": [p.chunk_id for p in passages],
                    "closed_answer": inputs.closed_texts[j],
                    "context_answer": inputs.context_texts[j],
                    **{name: float(inputs.X[j, c]) for c, name in enumerate(UTILITY_FEATURES)},
                    **{key: float(value) for key, value in label.items()},
                }
            )
    y = np.asarray([r[section.label] for r in records], dtype=float)
    usable = np.isfinite(y)
    line = dropped_line(len(rows), skipped, int((~usable).sum()), section.label)
    if line is not None:
        ctx.log.warning(line)
    if usable.sum() < section.folds:
        raise ConfigError(
            f"only {int(usable.sum())} pairs with a finite {section.label} (need >= folds={section.folds})",
            "fit_utility",
        )
    X = np.asarray([[r[name] for name in UTILITY_FEATURES] for r in records], dtype=float)
    model, columns, quality, fitted = fit_and_score(  # cut at the run's τ's (= D²-RAG's, checked at load)
        section, X[usable], y[usable], ctx.config.seed, section.tau_pos, section.tau_neg
    )
    rows_used = {int(i): j for j, i in enumerate(np.flatnonzero(usable))}
    for i, record in enumerate(records):
        j = rows_used.get(i)
        for name, values in columns.items():
            record[name] = values[j] if j is not None else (None if name == "oof_class" else float("nan"))

    save_learned(model, ctx.out_dir / "utility.json")
    datasets.Dataset.from_list(records).save_to_disk(str(ctx.out_dir / "pairs"))
    summary = {
        "split": section.split,
        "label": section.label,
        "model": section.model,
        "kind": model.kind,
        "pairs": len(records),
        "usable": int(usable.sum()),
        "skipped_no_passages": skipped,
        "dropped_not_finite": int((~usable).sum()),
        "label_mean": float(y[usable].mean()),
        "label_std": float(y[usable].std()),
        "folds": section.folds,
        "l2": section.l2,
        "oof": quality,
        **fitted,
    }
    atomic_write_json(ctx.out_dir / "summary.json", summary)
    out = {
        "pairs": len(records),
        "model": section.model,
        "class_agreement": round(quality["class_agreement"], 4),
        "majority_agreement": round(quality["majority_agreement"], 4),
        "macro_f1": round(quality["macro_f1"], 4),
        "predicted_noisy": quality["predicted"]["noisy"],
    }
    if section.model == "ridge":
        out.update({"oof_r2": round(quality["r2"], 4), "oof_spearman": round(quality["spearman"], 4)})
    return out
