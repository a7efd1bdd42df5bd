"""Stage ``fit_utility``: train D²-RAG's gold-free utility predictor on ΔSePer labels.

D²-RAG's Stage 2 picks its decoding mode from the utility δ of the retrieved context; the paper's δ is ΔSePer, which
needs the gold answer (:mod:`workbench.methods.utility`). This stage builds the runtime substitute: for the first
``fit_utility.limit`` questions of ``fit_utility.split`` it retrieves D²-RAG's context (the run's retriever, top-k,
the same context block and answering prompt as the method), labels each (question, context) pair with ΔSePer
(:func:`workbench.uncertainty.seper.delta_seper`, one sampling call and one NLI call per batch), computes the
gold-free features (:func:`workbench.methods.utility.utility_inputs`), and fits a
:class:`~workbench.methods.utility.UtilityPredictor` (ridge) on ``fit_utility.label``.

Quality is measured out of fold (``folds``-fold cross-validation on the same pairs, each fold predicted by a model
that never saw it): R², MAE, Spearman ρ, and — what D²-RAG acts on — how often the predicted utility class
(relevant / neutral / noisy at D²-RAG's default τ_pos / τ_neg) equals the oracle's class.

Outputs: ``utility.json`` (the predictor fitted on every pair; read by ``evaluate``), ``pairs/`` (an HF dataset: one
row per pair with its features, SePer terms, out-of-fold prediction and both answers) and ``summary.json``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError
from workbench.stages.context import StageContext

CLASSES = ("noisy", "neutral", "relevant")


def _validate(section: Any) -> None:
    for key in ("k", "passage_chars", "max_new_tokens", "samples", "batch_questions"):
        value = getattr(section, key)
        if value < 1:
            raise ConfigError(f"must be >= 1, got {value}", f"fit_utility.{key}")
    if section.folds < 2:
        raise ConfigError(f"must be >= 2, got {section.folds}", "fit_utility.folds")
    if section.limit is not None and section.limit < section.folds:
        raise ConfigError(f"needs at least folds={section.folds} questions, got {section.limit}", "fit_utility.limit")
    if not math.isfinite(section.l2) or section.l2 < 0:
        raise ConfigError(f"must be a finite number >= 0, got {section.l2}", "fit_utility.l2")


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
    from workbench.methods.utility import UTILITY_FEATURES, UtilityPredictor

    names = feature_names or UTILITY_FEATURES
    pred = np.full(y.shape, np.nan)
    for fold in np.unique(folds):
        held = folds == fold
        pred[held] = UtilityPredictor(l2, names).fit(X[~held], y[~held]).predict(X[held])
    return pred


def regression_quality(y: np.ndarray, pred: np.ndarray, tau_pos: float, tau_neg: float) -> dict[str, Any]:
    """R² (against the labels' mean), MAE, Spearman ρ, and the agreement of utility classes at τ_pos / τ_neg.

    ``class_agreement`` is the share of pairs whose predicted class equals the label's; ``confusion[a][b]`` counts
    pairs of label class ``a`` predicted as class ``b``; ``mean_baseline_mae`` is the MAE of always predicting the
    labels' mean and ``majority_agreement`` the class agreement of always predicting the commonest class (what a
    predictor has to beat).
    """
    from workbench.methods.d2rag import utility_class
    from workbench.metrics.rejection import spearman

    residual = float(np.sum((y - pred) ** 2))
    total = float(np.sum((y - y.mean()) ** 2))
    truth = [utility_class(float(v), tau_pos, tau_neg) for v in y]
    guess = [utility_class(float(v), tau_pos, tau_neg) for v in pred]
    confusion = {a: {b: 0 for b in CLASSES} for a in CLASSES}
    for a, b in zip(truth, guess, strict=True):
        confusion[a][b] += 1
    return {
        "r2": 1.0 - residual / total if total > 0 else float("nan"),
        "mae": float(np.mean(np.abs(y - pred))),
        "mean_baseline_mae": float(np.mean(np.abs(y - y.mean()))),
        "spearman": float(spearman(pred, y)) if np.ptp(y) > 0 and np.ptp(pred) > 0 else float("nan"),
        "class_agreement": float(np.mean([a == b for a, b in zip(truth, guess, strict=True)])),
        "majority_agreement": max(truth.count(c) for c in CLASSES) / len(truth),
        "confusion": confusion,
        "tau_pos": tau_pos,
        "tau_neg": tau_neg,
    }


def run(ctx: StageContext) -> dict[str, Any]:
    """Label (question, context) pairs with ΔSePer, compute gold-free features, fit and save the predictor."""
    import datasets

    from workbench.core.logs import track
    from workbench.data.dataset_store import load_saved_dataset_dict
    from workbench.methods.common import context_block
    from workbench.methods.d2rag import D2RAGSettings
    from workbench.methods.utility import UTILITY_FEATURES, UtilityPredictor, utility_inputs
    from workbench.stages.evaluate import build_tools
    from workbench.uncertainty.seper import SeperSettings, delta_seper

    section = ctx.config.fit_utility
    _validate(section)
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
    if usable.sum() < section.folds:
        raise ConfigError(
            f"only {int(usable.sum())} pairs with a finite {section.label} (need >= folds={section.folds})",
            "fit_utility",
        )
    X = np.asarray([[r[name] for name in UTILITY_FEATURES] for r in records], dtype=float)
    folds = fold_ids(int(usable.sum()), section.folds, ctx.config.seed)
    oof = np.full(y.shape, np.nan)
    oof[usable] = out_of_fold(X[usable], y[usable], folds, section.l2)
    for record, value in zip(records, oof, strict=True):
        record["oof_prediction"] = float(value)
    predictor = UtilityPredictor(section.l2).fit(X[usable], y[usable])
    defaults = D2RAGSettings()
    quality = regression_quality(y[usable], oof[usable], defaults.tau_pos, defaults.tau_neg)
    from workbench.methods.learned import save_learned

    save_learned(predictor, ctx.out_dir / "utility.json")
    datasets.Dataset.from_list(records).save_to_disk(str(ctx.out_dir / "pairs"))
    summary = {
        "split": section.split,
        "label": section.label,
        "pairs": len(records),
        "usable": int(usable.sum()),
        "skipped_no_passages": skipped,
        "label_mean": float(y[usable].mean()),
        "label_std": float(y[usable].std()),
        "folds": section.folds,
        "l2": section.l2,
        "oof": quality,
        "coefficients": dict(zip(UTILITY_FEATURES, (float(c) for c in predictor.coef_), strict=True)),
    }
    atomic_write_json(ctx.out_dir / "summary.json", summary)
    return {
        "pairs": len(records),
        "oof_r2": round(quality["r2"], 4),
        "oof_spearman": round(quality["spearman"], 4),
        "class_agreement": round(quality["class_agreement"], 4),
    }
