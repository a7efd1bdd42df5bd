"""Isotonic and centered isotonic calibration: fitted by scikit-learn, predicted by numpy.

Both store a list of breakpoints ``(x_j, y_j)`` and predict with ``np.interp``: linear between breakpoints,
clipped to the end values outside ``[x_0, x_last]``.

The fit uses scikit-learn (imported inside :meth:`IsotonicCalibrator.fit` only: the runtime loads fitted
breakpoints and never fits, so it never imports scikit-learn). Plain isotonic stores ``IsotonicRegression``'s own
``X_thresholds_`` / ``y_thresholds_``, so :meth:`IsotonicCalibrator.predict` equals ``IsotonicRegression(y_min=0,
y_max=1, out_of_bounds="clip").predict`` on any scores (up to the last bits of the interpolation). Centered isotonic
has no scikit-learn estimator: it is built from the blocks of scikit-learn's ``isotonic_regression`` on the scores
merged the way ``IsotonicRegression`` merges them (:func:`merge_close_scores`), then centred here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Self

import numpy as np

from workbench.calibration.base import (
    FORMAT_VERSION,
    Calibrator,
    as_scores,
    check_fit_inputs,
    finite_vector,
    require_keys,
)
from workbench.core.errors import DataError

MERGE_EPS = float(np.finfo(np.float64).resolution)
"""Scores closer than this (absolutely) to the first score of a run count as one score: scikit-learn's
``_make_unique`` rule (``np.finfo(float64).resolution`` = 1e-15), which absorbs values stored a few ulps apart."""


@dataclass(frozen=True)
class IsotonicBlock:
    """One constant piece of the isotonic fit: its value and the (merged) scores it covers."""

    value: float
    x_first: float
    x_last: float
    x_mean: float
    weight: float


def merge_close_scores(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The scores merged as scikit-learn's ``IsotonicRegression`` merges them: ``(x, mean label, count)`` per group.

    Sorted by score (then label), a score starts a new group when it is at least :data:`MERGE_EPS` above the
    *first* score of the current group; otherwise it joins it. A group is represented by its first (smallest)
    score, its mean label and its size. Exact duplicates always merge; scores a few ulps apart merge too.
    """
    order = np.lexsort((labels, scores))
    s, y = scores[order], labels[order]
    ux, first, counts = np.unique(s, return_index=True, return_counts=True)
    if ux.size > 1 and np.diff(ux).min() < MERGE_EPS:
        starts = [0]
        current = ux[0]
        for i in range(1, ux.size):
            if ux[i] - current >= MERGE_EPS:
                starts.append(i)
                current = ux[i]
        group = np.asarray(starts)
        ux, first = ux[group], first[group]
        counts = np.add.reduceat(counts, group)
    sum_y = np.add.reduceat(y, first)
    return ux, sum_y / counts, counts.astype(float)


def isotonic_blocks(scores: np.ndarray, labels: np.ndarray) -> list[IsotonicBlock]:
    """Increasing isotonic regression of ``labels`` on ``scores`` (scikit-learn's), as a list of constant blocks.

    The scores are merged by :func:`merge_close_scores`; ``sklearn.isotonic.isotonic_regression`` (PAV, weights =
    group sizes, bounded to [0, 1]) fits the mean labels; each run of equal fitted values is one block, whose
    ``x_mean`` is the weight-averaged score. PAV pools equal values too, so block values strictly increase.
    """
    from sklearn.isotonic import isotonic_regression

    x, y, w = merge_close_scores(scores, labels)
    fitted = np.asarray(isotonic_regression(y, sample_weight=w, y_min=0.0, y_max=1.0, increasing=True), dtype=float)
    starts = np.flatnonzero(np.r_[True, fitted[1:] != fitted[:-1]])
    ends = np.r_[starts[1:], fitted.size] - 1
    return [
        IsotonicBlock(
            value=float(fitted[lo]),
            x_first=float(x[lo]),
            x_last=float(x[hi]),
            x_mean=float((w[lo : hi + 1] * x[lo : hi + 1]).sum() / w[lo : hi + 1].sum()),
            weight=float(w[lo : hi + 1].sum()),
        )
        for lo, hi in zip(starts, ends, strict=True)
    ]


def isotonic_breakpoints(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Plain isotonic regression: scikit-learn's ``IsotonicRegression(increasing=True, y_min=0, y_max=1,
    out_of_bounds="clip")`` fitted on the data, and its thresholds ``(X_thresholds_, y_thresholds_)``.

    These are each block's first and last (merged) score at the block's value; interpolating them with clipping
    is the estimator's prediction: constant on each block, linear between one block's last score and the next
    block's first.
    """
    from sklearn.isotonic import IsotonicRegression

    fit = IsotonicRegression(increasing=True, y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(scores, labels)
    return np.asarray(fit.X_thresholds_, dtype=float), np.asarray(fit.y_thresholds_, dtype=float)


def centered_breakpoints(blocks: list[IsotonicBlock]) -> tuple[np.ndarray, np.ndarray]:
    """Centered isotonic regression (Oron & Flournoy 2017, as in their R package ``cir::cirPAVA``).

    Each isotonic block B with value v_B becomes the single point ``(x̄_B, v_B)``, ``x̄_B = Σ_{i∈B} w_i x_i / Σ w_i``,
    so the interpolated curve is strictly increasing between them. Blocks whose value is exactly 0 or 1 (the
    bounds of a probability) stay flat: they keep their first and last score. If the points no longer reach the
    smallest or largest fitted score, ``(x_min, v_first)`` / ``(x_max, v_last)`` are added, so the curve is flat
    there, as the IR fit is.
    """
    xs: list[float] = []
    ys: list[float] = []
    for b in blocks:
        if b.value in (0.0, 1.0):
            xs.append(b.x_first)
            ys.append(b.value)
            if b.x_last != b.x_first:
                xs.append(b.x_last)
                ys.append(b.value)
        else:
            xs.append(b.x_mean)
            ys.append(b.value)
    if xs[0] > blocks[0].x_first:
        xs.insert(0, blocks[0].x_first)
        ys.insert(0, ys[0])
    if xs[-1] < blocks[-1].x_last:
        xs.append(blocks[-1].x_last)
        ys.append(ys[-1])
    return np.array(xs), np.array(ys)


class IsotonicCalibrator(Calibrator):
    """Non-decreasing step-and-ramp map fitted by isotonic regression (``centered=True``: centered isotonic).

    Plain: scikit-learn's ``IsotonicRegression(increasing=True, y_min=0, y_max=1, out_of_bounds="clip")`` (the
    least-squares non-decreasing fit of the labels), its thresholds stored and predicted by ``np.interp``.
    Centered: every flat stretch collapsed to one point at its weighted mean score (see
    :func:`centered_breakpoints`), which keeps far fewer ties, hence more of the score's ranking (AUROC, PRR).
    Scores outside the fitted range get the end values.
    """

    def __init__(self, centered: bool = False) -> None:
        self.centered = bool(centered)
        self.x_: np.ndarray | None = None
        self.y_: np.ndarray | None = None

    @property
    def kind(self) -> str:
        return "centered_isotonic" if self.centered else "isotonic"

    @property
    def is_fitted(self) -> bool:
        return self.x_ is not None

    def fit(self, scores: Sequence[float], labels: Sequence[float]) -> Self:
        """Fit on finite scores and labels in [0, 1] with both classes (:func:`check_fit_inputs`); imports
        scikit-learn (training only)."""
        s, y = check_fit_inputs(scores, labels)
        if self.centered:
            self.x_, self.y_ = centered_breakpoints(isotonic_blocks(s, y))
        else:
            self.x_, self.y_ = isotonic_breakpoints(s, y)
        return self

    def predict(self, scores: Sequence[float]) -> np.ndarray:
        self._require_fitted()
        assert self.x_ is not None and self.y_ is not None
        return np.interp(as_scores(scores), self.x_, self.y_)

    def to_dict(self) -> dict[str, Any]:
        self._require_fitted()
        assert self.x_ is not None and self.y_ is not None
        return {"kind": self.kind, "version": FORMAT_VERSION, "x": self.x_.tolist(), "y": self.y_.tolist()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IsotonicCalibrator:
        """Rebuild from :meth:`to_dict` output; :class:`DataError` on missing keys, NaN or non-monotone values."""
        kind = d.get("kind") if isinstance(d, dict) else None
        require_keys(d, str(kind), ("x", "y"))
        x = finite_vector(d["x"], "x", str(kind))
        y = finite_vector(d["y"], "y", str(kind))
        where = f"calibrator {kind!r}"
        if x.size != y.size:
            raise DataError(f"{x.size} x breakpoints but {y.size} y values", where)
        if np.any(np.diff(x) <= 0):
            raise DataError("non-monotone breakpoints: x must be strictly increasing", where)
        if np.any(np.diff(y) < 0):
            raise DataError("non-monotone breakpoints: y must be non-decreasing", where)
        if y.min() < 0.0 or y.max() > 1.0:
            raise DataError("breakpoint values y must lie in [0, 1]", where)
        out = cls(centered=kind == "centered_isotonic")
        out.x_, out.y_ = x, y
        return out
