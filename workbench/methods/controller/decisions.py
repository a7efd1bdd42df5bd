"""The controller's decision types (spec §9.1, S1–S8): one dataclass per decision, each a :class:`Decision`.

Besides its values every decision carries ``raw`` (the controller's raw reply), ``fallback`` (the reply was unusable
and the documented fallback value was returned), ``note`` (why) and ``detail``; ``to_dict()`` is what InSemRAG writes
into its trace.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "ChannelWeights",
    "Completeness",
    "Compression",
    "Coverage",
    "Decision",
    "Elements",
    "Enrichment",
    "FollowUp",
    "Relevance",
]


@dataclass(kw_only=True)
class Decision:
    """What every controller decision carries besides its values.

    ``raw``: the controller's raw reply (generated text, a list of texts, next-token log-probs; None for the
    heuristic controller); ``fallback``: the reply was unusable and the documented fallback value was returned;
    ``note``: why; ``detail``: anything else worth logging (checks, intent probabilities, prompts' sizes).
    """

    raw: Any = None
    fallback: bool = False
    note: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the values and the bookkeeping fields."""
        return _jsonable(asdict(self))


@dataclass(kw_only=True)
class Enrichment(Decision):
    """S1: ``dense`` — a paraphrase that states the query's full intent; ``keywords`` — entities and rare terms."""

    dense: str
    keywords: list[str]


@dataclass(kw_only=True)
class ChannelWeights(Decision):
    """S2: one non-negative weight per channel, summing to 1; ``intents``: the intent distribution, when used."""

    weights: dict[str, float]
    intents: dict[str, float] | None = None


@dataclass(kw_only=True)
class Relevance(Decision):
    """S3: ``score`` in [0, 1] — how useful the candidate is for the query; ``keep`` — keep (True) or drop it."""

    score: float
    keep: bool


@dataclass(kw_only=True)
class Completeness(Decision):
    """S4: semantic completeness ``score`` in [0, 1]; the method calls the chunk damaged when it is below τ."""

    score: float


@dataclass(kw_only=True)
class Compression(Decision):
    """S5: the repaired chunk's ``text`` (previous + chunk + next, compressed to the length budget)."""

    text: str


@dataclass(kw_only=True)
class Elements(Decision):
    """S6: the key information ``elements`` the evidence must cover (1 to ``max_elements`` short statements)."""

    elements: list[str]


@dataclass(kw_only=True)
class Coverage(Decision):
    """S7: per element of ``elements``, the coverage score in [0, 1] by the evidence (``scores``) and the passage
    that covers it best (``best``, an index into the passages; None without passages). ``score`` is the lowest
    element score (1 for no elements): the evidence covers the question iff ``score >= γ``."""

    elements: list[str]
    scores: list[float]
    best: list[int | None] = field(default_factory=list)
    score: float = field(init=False)

    def __post_init__(self) -> None:
        self.score = float(min(self.scores)) if self.scores else 1.0

    def uncovered(self, gamma: float) -> list[str]:
        """The elements whose score is below ``gamma``."""
        return [e for e, s in zip(self.elements, self.scores, strict=True) if s < gamma]


@dataclass(kw_only=True)
class FollowUp(Decision):
    """S8: a standalone search ``query`` for one uncovered element."""

    query: str


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
