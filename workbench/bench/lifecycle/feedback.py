"""Simulated feedback → ``recalibrate`` → a new bundle version, and the calibration before / after on the held-out
feedback, through the library's own functions (:mod:`workbench.recalibration`): nothing here refits or compares
calibrators itself.

The feedback file is what a user would hand ``workbench recalibrate --feedback``: one row per answer of the shifted
stream with its ``id``, ``question``, ``answer``, ``label`` (closed-book correct), ``label_retrieved`` (the answer
with retrieval correct: what routed quality is measured with) and the ``features`` ``workbench score`` gave it.
When the library refuses (too few held-out answers of a label, or a refit that is not better), the refusal's line is
the result: the report says why, and no version is written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workbench.core.atomic import atomic_write_text
from workbench.core.errors import DataError
from workbench.metrics.bootstrap import N_RESAMPLES
from workbench.recalibration.compare import comparison, holdout_split, recalibrate
from workbench.recalibration.feedback import read_feedback
from workbench.recalibration.version import bundle_decision, write_version
from workbench.runtime import load_bundle


def feedback_rows(
    scored: Sequence[dict[str, Any]], labels: Sequence[int], retrieved_labels: Sequence[int]
) -> list[dict[str, Any]]:
    """The feedback rows of scored answers (``scores.jsonl`` rows) and their labels."""
    return [
        {
            "id": row["id"],
            "question": row["question"],
            "answer": row["answer"],
            "label": int(label),
            "label_retrieved": int(retrieved),
            "features": row["features"],
        }
        for row, label, retrieved in zip(scored, labels, retrieved_labels, strict=True)
    ]


def write_feedback(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """``rows`` as a JSONL feedback file at ``path`` (atomically)."""
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
    return path


def recalibrate_on(
    bundle: Path,
    feedback: Path,
    retrieved_labels: Sequence[int],
    out: Path,
    *,
    holdout: float,
    seed: int,
    force: bool,
    overrides: dict[str, Any],
    refit: Sequence[str] = ("tau",),
    tau_rule: str | None = None,
    n_resamples: int = N_RESAMPLES,
) -> dict[str, Any]:
    """Recalibrate ``bundle`` on ``feedback`` (whose rows' ``label_retrieved`` are ``retrieved_labels``, in file
    order) and write the new version under ``out`` (a name directory), refitting the calibrators and ``refit``
    (``tau`` / ``router``, as ``recalibrate --refit``; ``tau_rule`` as ``--tau-rule``); then the bundle's P(correct)
    before (the parent) and after (the new version) on the held-out part, with paired BCa intervals of its AUROC and
    ECE. Routed quality and the retrieval rate of each decision are recalibrate's own (``metrics.routing``).
    ``{"refused": line}`` when the library refuses; ``{"version", "path", "metrics", "p_correct", "routed",
    "reliability"}`` otherwise."""
    manifest, calibrators, decision = bundle_decision(bundle)
    rows = read_feedback(feedback, calibrators.features)
    try:
        result = recalibrate(
            calibrators,
            rows,
            holdout=holdout,
            seed=seed,
            force=force,
            n_resamples=n_resamples,
            where=feedback.name,
            decision=decision,
            refit=("calibrators", *refit),
            tau_rule=tau_rule,
        )
    except DataError as exc:
        return {"refused": str(exc), "rows": len(rows), "correct": sum(r.label for r in rows)}
    path = write_version(bundle, result, feedback, holdout=holdout, seed=seed, forced=not result.better, out=out)
    labels = np.array([r.label for r in rows], dtype=int)
    held = holdout_split(labels, holdout, seed)  # the split recalibrate held out: seeded, so the same rows
    raw = np.array([r.features for r in rows], dtype=float)[held]
    parent, child = load_bundle(bundle, overrides), load_bundle(path, overrides)
    before = np.array([parent.decide(list(x)).p_correct for x in raw])
    after = np.array([child.decide(list(x)).p_correct for x in raw])
    p_metrics = comparison(["p_correct"], before[:, None], after[:, None], labels[held], seed, n_resamples)
    closed = labels[held]
    retrieved = np.asarray(retrieved_labels, dtype=int)[held]
    per_feature = {
        name: (
            calibrators.transform(np.array([calibrators.clean(x)[0] for x in raw]))[:, j].tolist(),
            result.calibrators.transform(np.array([result.calibrators.clean(x)[0] for x in raw]))[:, j].tolist(),
        )
        for j, name in enumerate(calibrators.features)
    }
    return {
        "parent": manifest["version"],
        "version": path.name,
        "path": str(path),
        "better": result.better,
        "fit_rows": result.fit_rows,
        "holdout_rows": result.holdout_rows,
        "metrics": result.metrics,
        "p_correct": p_metrics["features"]["p_correct"],
        "refitted": list(result.refitted),
        "routed": {
            **result.metrics["routing"],
            "closed_book": float(closed.mean()),
            "always_retrieve": float(retrieved.mean()),
        },
        "reliability": {
            "labels": closed.tolist(),
            "p_correct": (before.tolist(), after.tolist()),
            "features": per_feature,
        },
    }
