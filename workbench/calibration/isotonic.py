"""Isotonic and centered isotonic calibration, fitted by the pool-adjacent-violators algorithm (PAV).

Both store a list of breakpoints ``(x_j, y_j)`` and predict with ``np.interp``: linear between breakpoints,
clipped to the end values outside ``[x_0, x_last]``.
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


@dataclass(frozen=True)
class PavBlock:
    """One constant piece of the isotonic fit: its value and the unique scores it covers."""

    value: float
    x_first: float
    x_last: float
    x_mean: float
    weight: float


def pav_blocks(scores: np.ndarray, labels: np.ndarray) -> list[PavBlock]:
    """Increasing isotonic regression of ``labels`` on ``scores`` by PAV, as a list of constant blocks.

    Equal scores are first merged (mean label, weight = their count). PAV then minimises
    ``Σ_i w_i (f(x_i) - ȳ_i)²`` over non-decreasing f by pooling adjacent blocks while the left one's value is
    ``>=`` the right one's, each pooled block taking the weighted mean ``Σ w ȳ / Σ w``. Pooling equal values too
    makes the block values strictly increasing. ``x_mean`` is the weight-averaged score of a block.
    """
    order = np.argsort(scores, kind="stable")
    s, y = scores[order], labels[order]
    ux, start, counts = np.unique(s, return_index=True, return_counts=True)
    sum_y = np.add.reduceat(y, start)
    # Stack of blocks: [sum w·y, sum w, sum w·x, first unique index, last unique index]
    stack: list[list[float]] = []
    for i in range(ux.size):
        w = float(counts[i])
        stack.append([float(sum_y[i]), w, w * float(ux[i]), i, i])
        while len(stack) > 1 and stack[-2][0] * stack[-1][1] >= stack[-1][0] * stack[-2][1]:
            right = stack.pop()
            left = stack[-1]
            left[0] += right[0]
            left[1] += right[1]
            left[2] += right[2]
            left[4] = right[4]
    return [
        PavBlock(
            value=float(np.clip(wy / w, 0.0, 1.0)),
            x_first=float(ux[int(lo)]),
            x_last=float(ux[int(hi)]),
            x_mean=wx / w,
            weight=w,
        )
        for wy, w, wx, lo, hi in stack
    ]


def isotonic_breakpoints(blocks: list[PavBlock]) -> tuple[np.ndarray, np.ndarray]:
    """Plain isotonic regression: each block contributes its first and last score at the block's value.

    Interpolating these gives scikit-learn's ``IsotonicRegression(out_of_bounds="clip")`` prediction: constant
    on each block, linear between the last score of one block and the first score of the next.
    """
    xs: list[float] = []
    ys: list[float] = []
    for b in blocks:
        xs.append(b.x_first)
        ys.append(b.value)
        if b.x_last != b.x_first:
            xs.append(b.x_last)
            ys.append(b.value)
    return np.array(xs), np.array(ys)


def centered_breakpoints(blocks: list[PavBlock]) -> tuple[np.ndarray, np.ndarray]:
    """Centered isotonic regression (Oron & Flournoy 2017, as in their R package ``cir::cirPAVA``).

    Each PAV block B with value v_B becomes the single point ``(x̄_B, v_B)``, ``x̄_B = Σ_{i∈B} w_i x_i / Σ w_i``,
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

    Plain: the least-squares non-decreasing fit of the labels, predicted like scikit-learn's
    ``IsotonicRegression(increasing=True, y_min=0, y_max=1, out_of_bounds="clip")``. Centered: every flat stretch
    collapsed to one point at its weighted mean score (see :func:`centered_breakpoints`), which keeps far fewer
    ties, hence more of the score's ranking (AUROC, PRR). Scores outside the fitted range get the end values.
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
        s, y = check_fit_inputs(scores, labels)
        blocks = pav_blocks(s, y)
        self.x_, self.y_ = centered_breakpoints(blocks) if self.centered else isotonic_breakpoints(blocks)
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
