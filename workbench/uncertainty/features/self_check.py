"""Self-checking features: P(True) and Verbalized Confidence (D²-RAG spec §3.3 items 14 and 15)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workbench.uncertainty.features.base import Feature

_NUMBER = re.compile(r"(?<![\d.])\d+(?:\.\d+)?")


def parse_verbalized_confidence(text: str) -> float:
    """Confidence in [0, 1] from a verbalized reply: the FIRST number in ``text`` divided by 100, clipped to [0, 1].

    "85" → 0.85; "I'd say 70%" → 0.70; "Confidence: 92.5" → 0.925; no number ("none", "") → 0.0 (the spec's
    failure value). Deviation from TTLM, which keeps every digit and '.' of the reply and casts the concatenation
    (so "70 out of 100" would give 70100): the first number is taken instead. A reply like "0.85" reads as 0.85 %
    (0.0085), as in TTLM. The stats graph no longer generates such a reply (Verbalized Confidence version 2 reads
    a digit distribution); the parser stays for replies generated elsewhere.
    """
    match = _NUMBER.search(text or "")
    if match is None:
        return 0.0
    value = float(match.group(0)) / 100.0
    return min(max(value, 0.0), 1.0)


@dataclass(frozen=True)
class PTrue(Feature):
    """P(True) (paper eq. 28; Kadavath et al. 2022; TTLM ``PTrue(number_of_ideas=5)``).

    Raw = the ``ptrue`` stat (``workbench.uncertainty.self_check_stats``): the model is shown the question, the
    distinct answers among the first 5 samples with their counts as brainstormed ideas, and the greedy answer as the
    proposed answer, and asked for a one-word verdict; ptrue = P(true) / (P(true) + P(false)) of the reply's first
    token, "true"/"True" and "false"/"False" pooled. ↑ = certain, orientation +1. Values outside [0, 1] are a
    producer bug (DataError); NaN passes through.

    Departures: eq. 28 reads P("(A)") after a lettered "(A) True / (B) False … The possible answer is:" prompt, and
    TTLM exp(mean log-prob of "true") in a forced reply "The generated answer is true"; here the verdict word is the
    reply's first token (no forced prefix; one forward pass, as in both) and the two verdicts are renormalised, so
    the mass a small chat model puts on other first tokens does not enter the value. The ideas are the shared
    samples (T = 0.7, as TTLM), not fresh samples at T = 1, each distinct answer listed once with its count.

    Version 2: one prompt shared with Verbalized Confidence (distinct ideas with counts; the instruction also
    offers a confidence digit), read in the same forward (version 1 listed every sample and asked for the verdict
    alone).
    """

    version = "2"

    name = "ptrue"
    category = "self-checking"
    orientation = 1
    stats = ("ptrue",)

    def raw(self, stats: Mapping[str, Any]) -> float:
        value = float(self._stat(stats, "ptrue"))
        if not math.isnan(value) and not -1e-6 <= value <= 1 + 1e-6:
            raise self._bad(f"ptrue must be a probability, got {value}")
        return value


@dataclass(frozen=True)
class VerbalizedConfidence(Feature):
    """Verbalized confidence (Tian et al. 2023; TTLM ``VerbalizedConfidence``): the confidence the model states.

    Raw = the ``verbalized_confidence`` stat: after the self-check prompt shared with P(True) and the forced reply
    opening "Confidence (0-9): ", the expected value of the next digit, Σ_k p_k · k / 9 with p renormalised over the
    digits 0–9 (``self_check_stats.verbalized_from_logprobs``). ↑ = certain, orientation +1. Values outside [0, 1]
    are a producer bug (DataError); NaN passes through.

    Departures: TTLM (and version 1 here) generate a reply to "a number from 0 to 100" and parse its first number
    (:func:`parse_verbalized_confidence`); here the number is one digit read from the next-token distribution in
    the same forward as P(True) — a 0–9 scale because every digit is one token (a number up to 100 spans up to three
    digit tokens in SmolLM2's vocabulary, which one next-token read cannot see), and the expected value rather than
    the argmax so the score is continuous (ten argmax levels would tie many questions). Version 2.
    """

    version = "2"

    name = "verbalized_confidence"
    category = "self-checking"
    orientation = 1
    stats = ("verbalized_confidence",)

    def raw(self, stats: Mapping[str, Any]) -> float:
        value = float(self._stat(stats, "verbalized_confidence"))
        if not math.isnan(value) and not -1e-6 <= value <= 1 + 1e-6:
            raise self._bad(f"verbalized_confidence must be in [0, 1], got {value}")
        return value
