"""Refit a bundle's calibrators on feedback and compare them with the bundle's own on a held-out part of it.

:func:`recalibrate` splits the feedback into a fit part and a held-out part (seeded, stratified by label:
:func:`holdout_split`), refits each feature's calibrator on the fit part with the ``calibrate`` stage's own fitting
(:func:`~workbench.calibration.choice.choose_calibrator`, restricted to the kind the bundle shipped; NaN and ±inf
imputed by the stage's :func:`~workbench.stages.calibrate.run.apply_nan_policy`, whose fit-part medians and ranges the
new set stores), and measures on the held-out part, per feature, the AUROC and ECE of the bundle's calibrators
(before) and of the refit (after), with paired BCa intervals (:mod:`workbench.metrics.bootstrap`).

With the parent's decision (``decision``: :class:`~workbench.recalibration.decision.ParentDecision`) it also routes
the held-out rows by the parent's policy and by the new one and compares their retrieval rates and routed quality
(:mod:`workbench.recalibration.routed`); ``refit`` may add ``"tau"`` and ``"router"`` to the calibrators
(:mod:`workbench.recalibration.decision`: how each is refitted on the fit part).

**Refusals** (one-line :class:`~workbench.core.errors.DataError`):

* *too small*: the held-out part must hold at least :data:`MIN_PER_CLASS` answers of each label, so that every
  AUROC and ECE it reports (and their intervals) rests on both classes; the message names the number of feedback rows
  that would give it at this held-out fraction and label balance;
* *not better*: the new version is better when the mean ECE over the features on the held-out part is lower after
  than before, and (when the parent's decision was given) its routed quality is not worse beyond its interval either:
  the upper end of the 90% interval of the quality change (after − before) is at least 0. Every refit moves the
  decision — new calibrators change what the router reads even with the parent's classifier and τ; a new τ or router
  trades retrievals for quality — and a decision that measurably loses quality is no improvement however well
  calibrated. Otherwise the comparison is refused unless ``force``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.calibration.calibrator_set import CalibratorSet
from workbench.calibration.choice import choose_calibrator
from workbench.core.errors import ConfigError, DataError
from workbench.metrics.bootstrap import N_RESAMPLES, bootstrap_intervals, describe
from workbench.metrics.calibration import ece
from workbench.metrics.ranking import auroc_rows
from workbench.recalibration.decision import (
    ParentDecision,
    check_refit,
    oof_p_correct,
    refit_router,
    refit_tau,
)
from workbench.recalibration.decision import tau_rule as choose_rule
from workbench.recalibration.feedback import Feedback
from workbench.recalibration.routed import interval_record, not_worse, rounded, routed_comparison
from workbench.stages.calibrate.run import apply_nan_policy

MIN_PER_CLASS = 10
"""The least number of held-out answers of each label (correct and wrong) a comparison is made on."""

FOLDS = 5
"""Out-of-fold folds of the refit's calibrator choice (the ``calibrate`` stage's default)."""


@dataclass
class Recalibration:
    """The refitted set (``calibrators``), the sizes of the fit and held-out parts and the held-out comparison
    (``metrics``: :func:`comparison`'s dict, with ``routing`` when the parent's decision was given); ``better``: the
    module docstring's rule held. ``refitted`` names what was refitted; ``classifier`` is the refitted router (None:
    the parent's), ``tau`` and ``rule`` the re-chosen τ and its rule (None: the parent's). ``fit_features`` (the fit
    part's raw features after the NaN policy) and ``fit_questions`` are what the new monitoring reference describes,
    ``fit_ids`` the rows the manifest's provenance names as fitted on."""

    calibrators: CalibratorSet
    fit_rows: int
    holdout_rows: int
    metrics: dict[str, Any]
    better: bool
    refitted: tuple[str, ...] = ("calibrators",)
    classifier: Any = None
    tau: float | None = None
    rule: str | None = None
    fit_features: np.ndarray | None = None
    fit_questions: tuple[str, ...] = ()
    fit_ids: tuple[str, ...] = ()


def holdout_split(labels: np.ndarray, holdout: float, seed: int) -> np.ndarray:
    """A mask of the held-out rows: ``round(holdout · n_c)`` of each label's ``n_c`` rows, drawn with
    ``np.random.default_rng(seed)`` (stratified, deterministic by seed)."""
    rng = np.random.default_rng(seed)
    mask = np.zeros(labels.size, dtype=bool)
    for value in (0, 1):
        rows = np.flatnonzero(labels == value)
        mask[rng.permutation(rows)[: round(holdout * rows.size)]] = True
    return mask


def required_rows(labels: np.ndarray, holdout: float) -> int:
    """The number of feedback rows whose held-out part holds :data:`MIN_PER_CLASS` of each label at this held-out
    fraction and this file's label balance (0 when one label is absent: no size suffices)."""
    minority = min(float(labels.mean()), 1.0 - float(labels.mean()))
    return 0 if minority == 0.0 else math.ceil(MIN_PER_CLASS / (holdout * minority))


def recalibrate(
    bundle_set: CalibratorSet,
    feedback: Sequence[Feedback],
    *,
    holdout: float = 0.3,
    seed: int = 0,
    force: bool = False,
    n_resamples: int = N_RESAMPLES,
    where: str = "feedback",
    decision: ParentDecision | None = None,
    refit: Sequence[str] = ("calibrators",),
    tau_rule: str | None = None,
) -> Recalibration:
    """Refit ``bundle_set``'s calibrators (and what ``refit`` adds) on the fit part of ``feedback`` and compare (module
    docstring). The features of each row are ``bundle_set.features`` in order
    (:func:`~workbench.recalibration.feedback.read_feedback`); ``tau_rule`` replaces the bundle's threshold rule.
    ConfigError on a held-out fraction outside (0, 1) or a bad ``refit``; DataError (naming ``where``) when
    refused."""
    if not 0.0 < holdout < 1.0:
        raise ConfigError(f"the held-out fraction must be between 0 and 1, got {holdout}", "recalibrate.holdout")
    refitted = check_refit(refit, decision)
    if tau_rule is not None and "tau" not in refitted:
        raise ConfigError("--tau-rule re-chooses tau: add --refit tau", "recalibrate.tau_rule")
    labels = np.array([r.label for r in feedback], dtype=int)
    raw = np.array([r.features for r in feedback], dtype=float).reshape(len(feedback), len(bundle_set.features))
    given = [r.label_retrieved for r in feedback]
    retrieved = np.array(given, dtype=int) if given and None not in given else None
    held = holdout_split(labels, holdout, seed)
    held_counts = (int((labels[held] == 0).sum()), int((labels[held] == 1).sum()))
    if min(held_counts) < MIN_PER_CLASS:
        need = required_rows(labels, holdout)
        size = f"about {need} feedback rows at this label balance" if need else "feedback with both labels"
        raise DataError(
            f"the held-out part ({held_counts[1]} correct, {held_counts[0]} wrong of {labels.size} rows at "
            f"--holdout {holdout}) is too small to show a difference: it needs {MIN_PER_CLASS} of each label, "
            f"so {size}",
            where,
        )
    rule = None
    if "tau" in refitted:  # checked before anything is fitted
        rule = choose_rule(decision, tau_rule, None if retrieved is None else retrieved[~held], where)
    features = list(bundle_set.features)
    clean, _, counts = apply_nan_policy({"fit": raw[~held], "holdout": raw[held]}, "fit", "impute", features)
    refit_set, oof = {}, []
    for j, name in enumerate(features):
        kind = bundle_set.calibrators[name].kind
        refit_set[name], column = choose_calibrator(clean["fit"][:, j], labels[~held], [kind], folds=FOLDS, seed=seed)
        oof.append(column if column is not None else refit_set[name].predict(clean["fit"][:, j]))
    new_set = CalibratorSet(tuple(features), refit_set, counts["medians"], counts["ranges"])
    before = bundle_set.transform(np.array([bundle_set.clean(row)[0] for row in raw[held]]))
    after = new_set.transform(clean["holdout"])
    mean_before, mean_after = (
        float(np.mean([ece(p[:, j], labels[held]) for j in range(len(features))])) for p in (before, after)
    )
    better = mean_after < mean_before
    if not better and not force:  # refused before the bootstrap's cost
        raise DataError(
            f"the refit is not better on the held-out part (mean ECE {mean_before:.4f} before, {mean_after:.4f} "
            "after): nothing written (--force writes it anyway)",
            where,
        )
    result = Recalibration(new_set, int((~held).sum()), int(held.sum()), {}, bool(better), refitted)
    result.fit_features = clean["fit"]
    result.fit_questions = tuple(r.question for r, h in zip(feedback, held, strict=True) if not h)
    result.fit_ids = tuple(r.id for r, h in zip(feedback, held, strict=True) if not h)
    result.metrics = comparison(features, before, after, labels[held], seed, n_resamples)
    if decision is None:
        return result
    calibrated = np.column_stack(oof)
    fit_labels = labels[~held]
    if "router" in refitted:
        result.classifier = refit_router(decision, calibrated, fit_labels, features, seed)
    if rule is not None:
        p_oof = oof_p_correct(decision, calibrated, fit_labels, features, seed, router="router" in refitted)
        fit_retrieved = None if retrieved is None else retrieved[~held]
        choice = refit_tau(p_oof, fit_labels, fit_retrieved, rule, decision)
        result.tau, result.rule = choice.tau, rule
    parent = decision.policy(bundle_set)
    new = decision.policy(new_set, result.classifier, result.tau)
    routing = routed_comparison(
        labels[held],
        None if retrieved is None else retrieved[held],
        parent.p_correct(raw[held]) < parent.tau,
        new.p_correct(raw[held]) < new.tau,
        seed=seed,
        n_resamples=n_resamples,
    )
    routing["tau"] = {"before": decision.tau, "after": new.tau, "rule": result.rule or decision.rule}
    result.metrics["routing"] = routing
    # even calibrators alone move the decision (they are what the router reads): every refit keeps the quality guard
    result.better = bool(better and not_worse(routing))
    if not result.better and not force:
        quality = routing["quality"]
        raise DataError(
            f"the new decision is not better on the held-out part: its {routing['metric']} changes by "
            f"{quality['change']} (interval {quality['change_ci']['low']} to {quality['change_ci']['high']}), worse "
            "beyond the interval: nothing written (--force writes it anyway)",
            where,
        )
    return result


def comparison(
    features: Sequence[str], before: np.ndarray, after: np.ndarray, labels: np.ndarray, seed: int, n_resamples: int
) -> dict[str, Any]:
    """Per feature ``{auroc, ece} → {before, after, before_ci, after_ci}`` of the calibrated probabilities ``before``
    and ``after`` (``[n, features]``) against ``labels``, and ``mean_ece`` (over the features) with the interval of
    its change (after − before); every interval from the same seeded resamples (paired)."""

    def statistic(idx: np.ndarray) -> np.ndarray:  # idx: (..., n) resamples → (figures, ...), vectorized
        y = labels[idx]
        values = []
        for probs in (before, after):
            values += [auroc_rows(probs[:, j][idx], y) for j in range(probs.shape[1])]
            values += [_ece_rows(probs[:, j][idx], y) for j in range(probs.shape[1])]
        k = len(features)
        values.append(np.mean(values[3 * k : 4 * k], axis=0) - np.mean(values[k : 2 * k], axis=0))
        return np.stack(values)

    point = statistic(np.arange(labels.size))
    intervals = bootstrap_intervals(statistic, labels.size, n_resamples=n_resamples, seed=seed, vectorized=True)
    k = len(features)
    out: dict[str, Any] = {"rows": int(labels.size), "intervals": describe(n_resamples), "features": {}}
    for j, name in enumerate(features):
        out["features"][name] = {
            metric: {
                "before": rounded(point[offset + j]),
                "after": rounded(point[2 * k + offset + j]),
                "before_ci": interval_record(intervals[offset + j]),
                "after_ci": interval_record(intervals[2 * k + offset + j]),
            }
            for metric, offset in (("auroc", 0), ("ece", k))
        }
    out["mean_ece"] = {
        "before": float(np.mean(point[k : 2 * k])),
        "after": float(np.mean(point[3 * k : 4 * k])),
        "change": float(point[-1]),
        "change_ci": interval_record(intervals[-1]),
    }
    return out


def _ece_rows(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """:func:`~workbench.metrics.calibration.ece` of every row of ``probs`` / ``labels`` (shape ``(..., n)``)."""
    flat = [
        ece(p, y) for p, y in zip(probs.reshape(-1, probs.shape[-1]), labels.reshape(-1, labels.shape[-1]), strict=True)
    ]
    return np.array(flat).reshape(probs.shape[:-1])
