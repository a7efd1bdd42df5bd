"""The controller interface: the retrieval channels, :class:`Controller` (one abstract method per decision S1–S8)
and the channel-weight helpers both implementations share."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from workbench.methods.controller.decisions import (
    ChannelWeights,
    Completeness,
    Compression,
    Coverage,
    Elements,
    Enrichment,
    FollowUp,
    Relevance,
)

__all__ = ["CHANNELS", "Controller", "normalise_weights", "uniform_weights"]

CHANNELS: tuple[str, ...] = ("dense", "sparse", "extended")
"""Retrieval channels a controller can weight: dense (paraphrase), sparse (keywords), extended (query + both)."""


class Controller(ABC):
    """The decisions InSemRAG delegates to its controller (spec §9.1). Implementations must be deterministic for
    a given input and never raise on a bad model reply: they return the documented fallback with ``fallback=True``.

    Passages are plain strings: ``refine``, ``coverage`` and ``follow_up`` get ``"title: text"``; ``completeness``
    and ``compress`` get the chunk text alone (its boundaries matter).
    """

    name: str = "controller"

    @abstractmethod
    def enrich(self, query: str) -> Enrichment:
        """S1: a dense paraphrase and sparse keywords for ``query``."""

    @abstractmethod
    def channel_weights(self, query: str, channels: Sequence[str]) -> ChannelWeights:
        """S2: a weight per name in ``channels`` (a subset of :data:`CHANNELS`), non-negative, summing to 1."""

    @abstractmethod
    def refine(self, query: str, passages: Sequence[str]) -> list[Relevance]:
        """S3: for each candidate passage, a relevance score for ``query`` and whether to keep it."""

    @abstractmethod
    def completeness(self, query: str, passages: Sequence[str]) -> list[Completeness]:
        """S4: for each chunk, its semantic completeness (can it be understood and used on its own?)."""

    @abstractmethod
    def compress(
        self, query: str, previous: str | None, center: str, following: str | None, max_tokens: int
    ) -> Compression:
        """S5: rewrite ``center``, stitched with its neighbours in the source document, into a self-contained
        passage of at most ``max_tokens`` tokens (no neighbour is None at a document boundary)."""

    @abstractmethod
    def elements(self, question: str) -> Elements:
        """S6: the key information elements needed to answer ``question``."""

    @abstractmethod
    def coverage(self, question: str, elements: Sequence[str], passages: Sequence[str]) -> Coverage:
        """S7: how well ``passages`` (the evidence so far) cover each of ``elements``."""

    @abstractmethod
    def follow_up(self, question: str, element: str, passages: Sequence[str]) -> FollowUp:
        """S8: a standalone search query for the uncovered ``element`` of ``question``."""


def uniform_weights(channels: Sequence[str]) -> dict[str, float]:
    """Equal weights over ``channels``."""
    return {c: 1.0 / len(channels) for c in channels} if channels else {}


def normalise_weights(raw: Mapping[str, float], channels: Sequence[str]) -> dict[str, float]:
    """``raw`` restricted to ``channels`` (missing: 0), negatives clipped to 0, scaled to sum to 1; uniform weights
    when nothing positive is left."""
    row = {c: max(float(raw.get(c, 0.0)), 0.0) for c in channels}
    total = sum(row.values())
    return {c: v / total for c, v in row.items()} if total > 0 else uniform_weights(channels)
