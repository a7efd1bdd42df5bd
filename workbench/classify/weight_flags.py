"""Flags on logistic-regression weights that the held-out split contradicts.

The retrieval-decision LR reads oriented features (higher = more certain), so a positive weight says "the higher this
feature, the likelier the closed-book answer is right". When that feature ranks correctness *below chance* on the
held-out split (AUROC < 0.5), the weight is not the feature's own signal: the model leans on it through its
correlation with the other features, or fitted noise of a small fit split. A reader of the weights table or plot
would take it for a telling feature (the quickstart's largest weight was such a one) — so every place that shows LR
weights marks it. The mirror case, a negative weight on a feature that ranks above chance, is marked the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

INTERCEPT = "(intercept)"
"""The key :meth:`~workbench.classify.logistic.LogisticModel.weights` gives the intercept (never flagged)."""


@dataclass(frozen=True)
class WeightFlag:
    """A feature whose LR ``weight`` has the sign its ``auroc`` on the held-out split contradicts (positive with an
    AUROC below 0.5, or negative with one above); ``largest`` when its weight is the largest in absolute value among
    the features."""

    feature: str
    weight: float
    auroc: float
    largest: bool

    def describe(self, split: str) -> str:
        """One Markdown line for the report."""
        sign = "positive" if self.weight > 0 else "negative"
        rank = f"the largest weight, {sign}" if self.largest else f"a {sign} weight"
        side = "below" if self.auroc < 0.5 else "above"
        return (
            f"**`{self.feature}` has {rank} ({self.weight:+.3g}), but ranks correctness {side} chance on `{split}` "
            f"(AUROC {self.auroc:.3f})**: the model leans on it through the other features or the fit split's noise; "
            "do not read the weight as that feature's signal."
        )

    def label(self) -> str:
        """The feature's name as plots of the weights show it: marked, with its held-out AUROC."""
        return f"{self.feature} (!) AUROC {self.auroc:.2f}"


def flag_weights(
    weights: Mapping[str, float], features: Mapping[str, Sequence[float]], labels: Sequence[float]
) -> list[WeightFlag]:
    """The flags (module docstring) of ``weights`` (feature → weight, the intercept ignored) given each feature's
    values on the held-out split (``features``) and its 0/1 ``labels``, in the order of ``weights``. A zero weight, a
    feature without values or one with an undefined AUROC (one class) is not flagged."""
    from workbench.metrics.ranking import auroc

    named = {name: float(w) for name, w in weights.items() if name != INTERCEPT}
    if not named:
        return []
    top = max(abs(w) for w in named.values())
    y = np.asarray(labels, dtype=float)
    flags = []
    for name, weight in named.items():
        if name not in features or weight == 0.0:
            continue
        value = auroc(np.asarray(features[name], dtype=float), y)
        if not math.isnan(value) and (value - 0.5) * weight < 0.0:
            flags.append(WeightFlag(name, weight, float(value), abs(weight) == top))
    return flags
