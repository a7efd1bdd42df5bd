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

from workbench.metrics.ranking import auroc

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

    def label(self, split: str) -> str:
        """The feature's name as plots of the weights show it: marked, with its AUROC on ``split``."""
        return f"{self.feature} (!) {split} AUROC {self.auroc:.2f}"


def flag_weights(
    weights: Mapping[str, float], features: Mapping[str, Sequence[float]], labels: Sequence[float]
) -> list[WeightFlag]:
    """The flags (module docstring) of ``weights`` (feature → weight, the intercept ignored) given each feature's
    values on the held-out split (``features``) and its 0/1 ``labels``, in the order of ``weights``. A zero weight, a
    feature without values or one with an undefined AUROC (one class) is not flagged."""

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


def describe_flags(flags: Sequence[WeightFlag], split: str) -> str:
    """One bold Markdown paragraph naming every flagged weight with its feature's AUROC on ``split`` (the largest
    weight said so), and why it must not be read as that feature's signal; empty without flags."""
    if not flags:
        return ""
    items = [
        f"`{f.feature}` {f.weight:+.3g}{' (the largest weight)' if f.largest else ''} with AUROC {f.auroc:.3f}"
        for f in flags
    ]
    return (
        f"**LR weights that `{split}` contradicts** — the weight's sign says the opposite of the feature's own "
        f"ranking of correctness there (AUROC below 0.5 with a positive weight, above 0.5 with a negative one): "
        f"{'; '.join(items)}. The model leans on such a feature through the other, correlated features or the fit "
        "split's noise: do not read its weight as its own signal. Marked (!) in the plot."
    )
