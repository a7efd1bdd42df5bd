"""DRAGIN's decision rule, written once: the method calls it for every word of an answer, the spec hands it to the
study and to batch decisions."""

from __future__ import annotations

from typing import Any

__all__ = ["decide"]


def decide(rind: Any, threshold: float) -> Any:
    """Retrieve iff a word's RIND exceeds ``threshold`` (Su et al., 2024, §3.1: "if the RIND score of any token
    exceeds a threshold", strictly greater, as the released code's ``value > hallucination_threshold``). ``rind``: a
    float or a numpy array (a question's decision score is its answer's largest word RIND); the result is a bool or
    a bool array of its shape."""
    return rind > threshold
