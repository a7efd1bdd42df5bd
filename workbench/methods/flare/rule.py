"""FLARE's decision rule, written once: the method (runtime and evaluate) calls it for every look-ahead sentence."""

from __future__ import annotations

from typing import Any

__all__ = ["decide"]


def decide(min_prob: Any, theta: float) -> Any:
    """Retrieve iff some token of the look-ahead sentence has probability below θ (Jiang et al., 2023, §3.2.1,
    confidence-based active retrieval: a sentence whose tokens all have probability ≥ θ is accepted as it is,
    otherwise FLARE retrieves and regenerates it), i.e. iff the sentence's lowest token probability
    ``min_prob < θ``. ``θ = 0`` never retrieves; ``θ = 1`` retrieves for every sentence with a token below
    certainty. ``min_prob``: a float or a numpy array; the result is a bool or a bool array of its shape."""
    return min_prob < theta
