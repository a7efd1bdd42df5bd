"""DTR's decision rule, written once: the method (runtime and evaluate) and the study's τ replays call it."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["decide"]


def decide(nll: Any, tau: float) -> Any:
    """Retrieve iff the closed-book answer's normalised NLL ``u ≥ τ`` (spec §10.4: the code's ``≥``); ``τ = inf``
    never retrieves, not even an empty answer's u = +inf (so DTR(τ = ∞) is No-RAG). ``nll``: a float or a numpy
    array; the result is a bool or a bool array of its shape."""
    return (nll >= tau) & (tau != math.inf)
