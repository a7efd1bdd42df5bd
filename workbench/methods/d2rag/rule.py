"""D²-RAG's decision rule, written once: retrieve iff P(closed-book answer correct) < τ (the code's strict ``<``;
τ = 1 + ε retrieves always). The study's τ replays, the bundle's decision records and the runtime's batch
decisions call it."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["ALWAYS_RETRIEVE_TAU", "decide"]

ALWAYS_RETRIEVE_TAU = math.nextafter(1.0, 2.0)
"""1 + ε: the top of D²-RAG's τ space — retrieve for every question. The classify stage's router pick can be exactly
this (retrieving always was the cheapest within Δ of Always-RAG), and the paper-default trial must lie inside."""


def decide(p_correct: Any, tau: float) -> Any:
    """Retrieve iff ``p_correct < tau``; ``p_correct`` a float or a numpy array (the result a bool or a bool array
    of its shape)."""
    return p_correct < tau
