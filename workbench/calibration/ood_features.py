"""A detector on the uncertainty features, measured beside the OOD flag and not part of it.

The issue the OOD flag answers asks whether the collected uncertainty features — what D²-RAG's calibrators read —
can tell a shifted question from an in-distribution one. :class:`FeatureNovelty` is that detector, built like the
flag's embedding check: each feature robust-standardised on the fit split (median, inter-quartile range), a
question's novelty the mean Euclidean distance to its ``neighbours`` nearest fit-split rows
(:func:`~workbench.calibration.ood.nearest_mean`), the threshold set for the same target false-positive rate by the
same split-conformal rule (:func:`~workbench.calibration.ood.calibrated_threshold`) on the fit rows cross-fitted (the
features exist only for collected rows). The calibrate and transfer stages measure it on every split and condition
they measure the flag on; it ships in no bundle: on the reference run it detects neither shift beyond chance
(docs/ood.md), so the flag leaves the features out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.calibration.ood import calibrated_threshold, nearest_mean
from workbench.core.errors import DataError


@dataclass
class FeatureNovelty:
    """``median`` / ``scale`` (per feature), the standardised fit rows ``reference``, ``neighbours`` (k) and
    ``threshold`` (a novelty above it is flagged; None: never)."""

    median: np.ndarray
    scale: np.ndarray
    reference: np.ndarray
    neighbours: int
    threshold: float | None

    @classmethod
    def fit(cls, matrix: np.ndarray, neighbours: int, target_fpr: float) -> FeatureNovelty:
        """Fit on the fit split's finite ``(rows, features)`` matrix, the threshold cross-fitted for ``target_fpr``
        (``neighbours`` capped at rows − 1); DataError on a non-finite value or too few rows for the target."""
        matrix = np.asarray(matrix, dtype=float)
        if matrix.ndim != 2 or matrix.shape[0] < 2 or not np.isfinite(matrix).all():
            raise DataError("the feature detector needs a finite (rows >= 2, features) matrix", "ood features")
        median = np.median(matrix, axis=0)
        quartiles = np.percentile(matrix, [25, 75], axis=0)
        scale = quartiles[1] - quartiles[0]
        scale = np.where(scale > 0, scale, np.where(matrix.std(axis=0) > 0, matrix.std(axis=0), 1.0))
        detector = cls(median, scale, (matrix - median) / scale, min(neighbours, matrix.shape[0] - 1), None)
        novelty = detector.novelty(matrix, leave_one_out=True)
        detector.threshold = calibrated_threshold(novelty, np.zeros(novelty.size, bool), target_fpr)
        return detector

    def novelty(self, matrix: np.ndarray, *, leave_one_out: bool = False) -> np.ndarray:
        """Each row's mean distance to its nearest standardised fit rows (``leave_one_out``: the rows are the fit
        rows, each against the others)."""
        rows = (np.asarray(matrix, dtype=float).reshape(-1, self.reference.shape[1]) - self.median) / self.scale
        squared = (rows**2).sum(axis=1)[:, None] + (self.reference**2).sum(axis=1)[None, :]
        distance = np.sqrt(np.maximum(squared - 2.0 * rows @ self.reference.T, 0.0))
        own = np.arange(rows.shape[0]) if leave_one_out else None
        return nearest_mean(distance, self.neighbours, skip=own)

    def checks(self, matrix: np.ndarray) -> list[list[str]]:
        """Each row's failed check: ``["features"]`` when its novelty is above the threshold, else []."""
        return [["features"] if self.threshold is not None and v > self.threshold else [] for v in self.novelty(matrix)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (a stage output, not a bundle part)."""
        return {
            "median": self.median.tolist(),
            "scale": self.scale.tolist(),
            "reference": self.reference.tolist(),
            "neighbours": self.neighbours,
            "threshold": self.threshold,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FeatureNovelty:
        """Rebuild from :meth:`to_dict` output (the calibrate stage's own file)."""
        return cls(
            np.asarray(d["median"], dtype=float),
            np.asarray(d["scale"], dtype=float),
            np.asarray(d["reference"], dtype=float),
            int(d["neighbours"]),
            None if d["threshold"] is None else float(d["threshold"]),
        )
