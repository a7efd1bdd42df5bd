"""Choosing each feature's calibrator from the data it has: out-of-fold log loss, guarded by the raw score's ranking.

A step function fitted to 30 labels fits their noise: isotonic regression on a small calibration split gives a few
plateaus (three values of P(correct) on the quickstart's 30 questions) and merges scores the raw feature still told
apart, which lowers its AUROC. :func:`choose_calibrator` fits every candidate kind out of fold on the fit split —
each question predicted by a calibrator that never saw it, the same folds for every kind — and keeps

1. the kind with the lowest mean out-of-fold log loss (the proper score of a probability: it punishes a confident
   plateau that the held-out questions contradict), unless
2. that kind loses ranking the raw score had: a candidate *keeps* the ranking when its map fitted on the whole split
   is strictly increasing (Platt with a positive slope, beta calibration with a or b positive: every pair of scores
   keeps its order, so the calibrated score's AUROC equals the raw one's on any data — a fact, not an estimate) or
   when its out-of-fold AUROC is no more than ``rank_tolerance`` below the raw score's AUROC on the same questions
   (an estimate for maps with plateaus; pooled over folds whose calibrators differ in level, it errs low, so it
   errs toward a strictly increasing calibrator). When the lowest-loss kind does not keep the ranking, the
   lowest-loss kind that does is chosen instead; when none does, the lowest-loss kind is kept and the record says
   the ranking is lost.

The record (:class:`CalibratorChoice`) travels with the fitted calibrator (``calibrator.choice``), into the calibrate
stage's ``calibrators.json`` and summary, the report and a bundle's ``learned/calibrators.json``, so what was chosen
and why can always be read back. With one candidate (a recipe that names its kind) nothing is chosen, but the same
measurements are recorded, so a calibrator that loses ranking is never shipped without saying so.

:class:`ChoosingCalibrator` is the ``auto`` kind of :func:`~workbench.calibration.registry.make_calibrator`: its
``fit`` runs the choice (the router search fits one per feature and fold), then it predicts and saves as the chosen
calibrator.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

import numpy as np

from workbench.calibration.base import Calibrator, check_fit_inputs
from workbench.calibration.catalog import KINDS, calibrator_from_dict, new_calibrator
from workbench.calibration.oof import out_of_fold_predict
from workbench.core.errors import ConfigError, DataError
from workbench.core.formatting import fmt

LOG_LOSS_CLIP = 1e-4
"""Out-of-fold probabilities are clipped to ``[LOG_LOSS_CLIP, 1 − LOG_LOSS_CLIP]`` before the log loss: an isotonic
plateau at exactly 0 or 1 contradicted by one held-out question then costs ln(10⁴) ≈ 9.2 nats, a heavy but finite
price, instead of making every comparison infinite."""

RANK_TOLERANCE = 0.01
"""How far below the raw score's AUROC a calibrator's out-of-fold AUROC may fall and still count as keeping it."""

RULES = ("log_loss", "ranking", "fixed", "too_few")
"""How a choice was made: the lowest out-of-fold log loss; the lowest loss among the kinds that keep the raw
ranking (the lowest-loss kind lost it); the only candidate (the recipe named the kind); too few questions of a class
to compare out of fold (the first strictly monotone candidate, else the first, was fitted)."""


@dataclass(frozen=True)
class CandidateFit:
    """One candidate kind measured out of fold: mean log loss, AUROC (None where undefined), whether its map fitted
    on the whole split is strictly increasing, and whether it keeps the raw score's ranking (module docstring).
    ``log_loss`` / ``auroc`` are None when nothing could be measured."""

    kind: str
    log_loss: float | None
    auroc: float | None
    strictly_increasing: bool
    keeps_ranking: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, numbers rounded to 6 digits."""
        return {
            "kind": self.kind,
            "log_loss": _rounded(self.log_loss),
            "auroc": _rounded(self.auroc),
            "strictly_increasing": self.strictly_increasing,
            "keeps_ranking": self.keeps_ranking,
        }


@dataclass(frozen=True)
class CalibratorChoice:
    """Which kind was chosen for one feature, by which rule (:data:`RULES`), the raw score's AUROC on the fit split,
    the folds and tolerance used, and every candidate's measurements (in the order they were given)."""

    chosen: str
    rule: str
    raw_auroc: float | None
    folds: int
    rank_tolerance: float
    candidates: tuple[CandidateFit, ...]

    @property
    def chosen_fit(self) -> CandidateFit:
        """The chosen candidate's measurements."""
        return next(c for c in self.candidates if c.kind == self.chosen)

    @property
    def ranking_lost(self) -> bool:
        """True when the shipped calibrator ranks worse than the raw score it calibrates (out of fold)."""
        return not self.chosen_fit.keeps_ranking

    def describe(self) -> str:
        """One line for reports and bundle notes: the chosen kind, the losses it was chosen on, and any ranking
        that was saved (another kind was lost) or lost."""
        chosen = self.chosen_fit
        others = [c for c in self.candidates if c.kind != self.chosen and c.log_loss is not None]
        if self.rule == "too_few":
            text = f"{self.chosen} (too few questions of a class to compare calibrators out of fold)"
        elif self.rule == "fixed":
            text = f"{self.chosen} (set by the recipe; out-of-fold log loss {fmt(chosen.log_loss)})"
        else:
            losses = ", ".join(f"{c.kind} {fmt(c.log_loss)}" for c in others)
            text = f"{self.chosen} (out-of-fold log loss {fmt(chosen.log_loss)}" + (f"; {losses})" if losses else ")")
        if self.rule == "ranking":
            best = min(others, key=lambda c: math.inf if c.log_loss is None else c.log_loss)
            text += (
                f"; {best.kind} had the lowest log loss but ranks worse than the raw score out of fold "
                f"(AUROC {fmt(self.raw_auroc)} → {fmt(best.auroc)})"
            )
        if self.ranking_lost:
            text += (
                f"; RANKING LOST: ranks worse than the raw score out of fold (AUROC {fmt(self.raw_auroc)} → "
                f"{fmt(chosen.auroc)})" + ("" if self.rule == "fixed" else " and no candidate kept it")
            )
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; :meth:`from_dict` reads it back."""
        return {
            "chosen": self.chosen,
            "rule": self.rule,
            "raw_auroc": _rounded(self.raw_auroc),
            "folds": self.folds,
            "rank_tolerance": self.rank_tolerance,
            "candidates": [c.to_dict() for c in self.candidates],
        }

    @classmethod
    def from_dict(cls, d: Any, where: str = "calibrator choice") -> CalibratorChoice:
        """Rebuild from :meth:`to_dict` output; :class:`DataError` on anything else (unknown keys or kinds, wrong
        types, a chosen kind that is not a candidate). Error messages never echo the values read."""
        keys = {"chosen", "rule", "raw_auroc", "folds", "rank_tolerance", "candidates"}
        if not isinstance(d, dict) or set(d) != keys:
            raise DataError(f"must be a mapping with exactly the keys {sorted(keys)}", where)
        raw_candidates = d["candidates"]
        if not isinstance(raw_candidates, list) or not 1 <= len(raw_candidates) <= len(KINDS):
            raise DataError(f"candidates must be a list of 1 to {len(KINDS)} entries", where)
        candidates = tuple(_candidate_from(c, where) for c in raw_candidates)
        kinds = [c.kind for c in candidates]
        if len(set(kinds)) != len(kinds) or d["chosen"] not in kinds:
            raise DataError("the candidates must be distinct kinds and include the chosen one", where)
        if d["rule"] not in RULES:
            raise DataError(f"rule must be one of {', '.join(RULES)}", where)
        folds, tolerance = d["folds"], d["rank_tolerance"]
        if isinstance(folds, bool) or not isinstance(folds, int) or folds < 0:
            raise DataError("folds must be a non-negative integer", where)
        if not _is_number(tolerance) or not 0.0 <= tolerance <= 1.0:
            raise DataError("rank_tolerance must be a number in [0, 1]", where)
        return cls(d["chosen"], d["rule"], _optional(d["raw_auroc"], where), folds, float(tolerance), candidates)


def _candidate_from(d: Any, where: str) -> CandidateFit:
    keys = {"kind", "log_loss", "auroc", "strictly_increasing", "keeps_ranking"}
    if not isinstance(d, dict) or set(d) != keys:
        raise DataError(f"each candidate must be a mapping with exactly the keys {sorted(keys)}", where)
    if d["kind"] not in KINDS:
        raise DataError(f"a candidate kind is not one of {', '.join(KINDS)}", where)
    if not isinstance(d["keeps_ranking"], bool) or not isinstance(d["strictly_increasing"], bool):
        raise DataError("keeps_ranking and strictly_increasing must be true or false", where)
    loss, auroc = _optional(d["log_loss"], where), _optional(d["auroc"], where)
    return CandidateFit(d["kind"], loss, auroc, d["strictly_increasing"], d["keeps_ranking"])


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _optional(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if not _is_number(value):
        raise DataError("a measured figure must be a finite number or null", where)
    return float(value)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


def choice_notes(choices: Mapping[str, Any], what: str = "calibrators") -> list[str]:
    """Lines for a bundle's notes from a calibrator set's ``choices`` (feature → record): which kind each feature
    got when one was chosen, and one line for each calibrator that loses ranking the raw score had."""
    records = {name: CalibratorChoice.from_dict(record) for name, record in choices.items()}
    chosen = [f"{name} {c.chosen}" for name, c in records.items() if c.rule in ("log_loss", "ranking")]
    lines = (
        [f"{what} chosen per feature by out-of-fold log loss on the fit split: {', '.join(chosen)}"] if chosen else []
    )
    lines += [
        f"{what}: the calibrator of {name} loses ranking its raw score had: {c.describe()}"
        for name, c in records.items()
        if c.ranking_lost
    ]
    return lines


def mean_log_loss(probabilities: np.ndarray, labels: np.ndarray) -> float:
    """Mean binary cross-entropy of ``labels`` (in [0, 1]) under ``probabilities`` clipped to
    ``[LOG_LOSS_CLIP, 1 − LOG_LOSS_CLIP]``."""
    p = np.clip(np.asarray(probabilities, dtype=float), LOG_LOSS_CLIP, 1.0 - LOG_LOSS_CLIP)
    y = np.asarray(labels, dtype=float)
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log1p(-p)))


def _auroc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    from workbench.metrics.ranking import auroc

    value = auroc(scores, labels)
    return None if math.isnan(value) else float(value)


def _check_options(kinds: Sequence[str], folds: int, rank_tolerance: float) -> tuple[str, ...]:
    kinds = tuple(kinds)
    if not kinds or len(set(kinds)) != len(kinds) or any(k not in KINDS for k in kinds):
        raise ConfigError(f"name one or more of {', '.join(KINDS)}, each once", "calibrator candidates")
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ConfigError("must be an integer of at least 2", "calibrator folds")
    if not _is_number(rank_tolerance) or not 0.0 <= rank_tolerance <= 1.0:
        raise ConfigError("must be a number in [0, 1]", "calibrator rank_tolerance")
    return kinds


def choose_calibrator(
    scores: Sequence[float],
    labels: Sequence[float],
    kinds: Sequence[str] = KINDS,
    *,
    folds: int = 5,
    seed: int = 0,
    rank_tolerance: float = RANK_TOLERANCE,
) -> tuple[Calibrator, np.ndarray | None]:
    """The calibrator chosen among ``kinds`` for ``scores`` / ``labels`` (module docstring), fitted on all of them,
    with its record in ``.choice``; and its out-of-fold predictions on the same questions (None under the
    ``too_few`` rule).

    Folds: :func:`~workbench.calibration.oof.stratified_folds` with ``seed``, ``min(folds, positives, negatives)`` of
    them, the same for every kind. Fewer than 2 of a class: nothing is compared (rule ``too_few``). ConfigError on
    unknown kinds or bad options, DataError on NaN scores or one-class labels (:func:`check_fit_inputs`).
    """
    kinds = _check_options(kinds, folds, rank_tolerance)
    s, y = check_fit_inputs(scores, labels)
    n_pos = int((y > 0.5).sum())
    n_folds = min(folds, n_pos, y.size - n_pos)
    fitted = {kind: new_calibrator(kind).fit(s, y) for kind in kinds}
    raw_auroc = _auroc(s, y)
    if n_folds < 2:
        chosen = next((k for k in kinds if fitted[k].strictly_increasing), kinds[0])
        candidates = tuple(
            CandidateFit(k, None, None, fitted[k].strictly_increasing, fitted[k].strictly_increasing) for k in kinds
        )
        choice = CalibratorChoice(chosen, "too_few", raw_auroc, 0, rank_tolerance, candidates)
        return _with_choice(fitted[chosen], choice), None
    oof = {kind: out_of_fold_predict(kind, s, y, n_folds, seed) for kind in kinds}
    measured = []
    for kind in kinds:
        auroc = _auroc(oof[kind], y)
        keeps = fitted[kind].strictly_increasing or (
            raw_auroc is None or (auroc is not None and auroc >= raw_auroc - rank_tolerance)
        )
        measured.append(CandidateFit(kind, mean_log_loss(oof[kind], y), auroc, fitted[kind].strictly_increasing, keeps))
    by_loss = sorted(measured, key=lambda c: c.log_loss if c.log_loss is not None else math.inf)  # stable: kinds order
    keeping = [c for c in by_loss if c.keeps_ranking]
    if len(kinds) == 1:
        chosen, rule = by_loss[0].kind, "fixed"
    elif by_loss[0].keeps_ranking or not keeping:
        chosen, rule = by_loss[0].kind, "log_loss"
    else:
        chosen, rule = keeping[0].kind, "ranking"
    choice = CalibratorChoice(chosen, rule, raw_auroc, n_folds, rank_tolerance, tuple(measured))
    return _with_choice(fitted[chosen], choice), oof[chosen]


def _with_choice(calibrator: Calibrator, choice: CalibratorChoice) -> Calibrator:
    calibrator.choice = choice.to_dict()
    return calibrator


_CACHE: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
_CACHE_SIZE = 4096
"""The router search refits the same feature column on the same folds for every candidate router (forward selection
tries each feature many times): the choices it has made are kept, keyed by a digest of the data and the options, so
each is made once per process. Cleared when full."""


class ChoosingCalibrator(Calibrator):
    """The ``auto`` calibrator: ``fit`` chooses among ``kinds`` by :func:`choose_calibrator` and fits the chosen one;
    ``predict``, ``to_dict`` and :meth:`resolved` are the chosen calibrator's (its ``choice`` holds the record)."""

    def __init__(
        self, kinds: Sequence[str] = KINDS, folds: int = 5, seed: int = 0, rank_tolerance: float = RANK_TOLERANCE
    ) -> None:
        self.kinds = _check_options(kinds, folds, rank_tolerance)
        self.folds, self.seed, self.rank_tolerance = folds, seed, float(rank_tolerance)
        self.chosen_: Calibrator | None = None

    @property
    def kind(self) -> str:
        return "auto"

    @property
    def is_fitted(self) -> bool:
        return self.chosen_ is not None

    @property
    def strictly_increasing(self) -> bool:
        return self.chosen_ is not None and self.chosen_.strictly_increasing

    @property  # type: ignore[override]
    def choice(self) -> dict[str, Any] | None:
        return None if self.chosen_ is None else self.chosen_.choice

    def fit(self, scores: Sequence[float], labels: Sequence[float]) -> Self:
        """Choose and fit (:func:`choose_calibrator`); a choice made before on the same data and options is reused."""
        s, y = check_fit_inputs(scores, labels)
        options = repr((self.kinds, self.folds, self.seed, self.rank_tolerance)).encode()
        key = hashlib.sha256(s.tobytes() + b"|" + y.tobytes() + b"|" + options).hexdigest()
        if key not in _CACHE:
            chosen, _ = choose_calibrator(
                s, y, self.kinds, folds=self.folds, seed=self.seed, rank_tolerance=self.rank_tolerance
            )
            if len(_CACHE) >= _CACHE_SIZE:
                _CACHE.clear()
            _CACHE[key] = (chosen.to_dict(), chosen.choice or {})
        saved, record = _CACHE[key]
        self.chosen_ = calibrator_from_dict(saved)
        self.chosen_.choice = dict(record)
        return self

    def predict(self, scores: Sequence[float]) -> np.ndarray:
        return self.resolved().predict(scores)

    def to_dict(self) -> dict[str, Any]:
        return self.resolved().to_dict()

    def resolved(self) -> Calibrator:
        self._require_fitted()
        assert self.chosen_ is not None
        return self.chosen_
