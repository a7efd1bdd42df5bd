"""A two-step router: the cheap features decide when they are sure, the expensive ones only inside a band.

Step 1 reads P(correct) of a router over cheap features (those whose stats ride on the greedy answer: confidence,
entropy, DTR's NLL, …): below ``low`` it retrieves, above ``high`` it keeps the closed-book answer. Only questions
with ``low ≤ p_cheap ≤ high`` pay for the expensive features (samples, NLI, self-checks) and are routed by the full
router at ``tau``. Per question it costs the cheap features, plus the band's share of the expensive components
the cheap ones do not already pay, plus the retrieval where it retrieves.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.uncertainty.stat_costs import feature_components


def cascade_route(
    p_cheap: np.ndarray, p_full: np.ndarray, low: float, high: float, tau: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(retrieve, in_band)`` per question: outside [low, high] the cheap router decides (retrieve iff
    p_cheap < low), inside it the full router (retrieve iff p_full < tau)."""
    p_cheap, p_full = np.asarray(p_cheap, dtype=float), np.asarray(p_full, dtype=float)
    band = (p_cheap >= low) & (p_cheap <= high)
    return np.where(band, p_full < tau, p_cheap < low), band


def cascade_features_cost(model: Any, cheap: tuple[str, ...], full: tuple[str, ...], band_rate: float) -> dict:
    """Per-question feature cost of a cascade: the cheap features' components, plus ``band_rate`` × the components
    only the full router's features need."""

    base = feature_components(cheap)
    extra = feature_components(full) - base
    first, second = model.components_cost(base), model.components_cost(extra)
    return {k: first[k] + band_rate * second[k] for k in first}


def cheap_features(features: tuple[str, ...]) -> tuple[str, ...]:
    """The features among ``features`` whose stats need only the greedy answer (free once it is generated)."""

    return tuple(f for f in features if feature_components([f]) <= {"greedy"})
