"""The heuristic controller: a deterministic, model-free substitute for the paper's prompted controller."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from workbench.methods.controller.base import Controller, normalise_weights
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
from workbench.methods.controller.text import (
    completeness_checks,
    content_words,
    extractive_stitch,
    norm_word,
    token_set,
    words,
)

__all__ = ["HeuristicController"]
_CHECK_PENALTY = {"starts_clean": 0.6, "ends_clean": 0.6, "balanced": 0.3, "long_enough": 0.3}


class HeuristicController(Controller):
    """A deterministic, model-free controller (a documented substitute, not the paper's; see the module doc).

    * S1 — dense view = the query unchanged; keywords = its content words (stop words dropped).
    * S2 — specificity σ = share of keywords that are capitalised or hold a digit; length λ = min(1, words / 20);
      explanatory cue ε = 1 for why / how / explain / describe / cause; multi-entity cue μ = 1 for two or more
      capitalised keywords. Raw weights dense = 1 + λ + ε, sparse = 1 + 2σ, extended = 1 + 0.5μ, normalised over
      the requested channels: entity lookups lean sparse, explanations lean dense (the paper's A.3 pattern).
    * S3 — score = share of the query's keywords found in the passage; keep iff ≥ ``min_overlap``.
    * S4 — 1 minus penalties for a broken start (0.6), a broken end (0.6), unbalanced brackets (0.3) and fewer
      than ``min_words`` words (0.3), clipped to [0, 1] (so a broken boundary is below τ = 0.5).
      ``min_words=50`` reproduces the paper's third heuristic rule; the default 0 turns that rule off.
    * S5 — :func:`extractive_stitch` (center whole, nearest neighbour sentences within the budget).
    * S6 — the question itself, as one element.
    * S7 — per element, the share of its keywords found anywhere in the evidence (set-level token overlap).
    * S8 — the element's keywords missing from the evidence (the element itself if none are missing).
    """

    name = "heuristic"

    def __init__(self, *, min_overlap: float = 1e-9, min_words: int = 0) -> None:
        self.min_overlap = min_overlap
        self.min_words = min_words

    def enrich(self, query: str) -> Enrichment:
        return Enrichment(dense=query.strip(), keywords=content_words(query))

    def channel_weights(self, query: str, channels: Sequence[str]) -> ChannelWeights:
        keywords = content_words(query)
        capitalised = [k for k in keywords if k[0].isupper() or any(ch.isdigit() for ch in k)]
        sigma = len(capitalised) / max(len(keywords), 1)
        lam = min(1.0, len(words(query)) / 20.0)
        lowered = query.lower()
        eps = float(bool(re.search(r"\b(why|how|explain|describe|cause[sd]?|reason)\b", lowered)))
        mu = float(len(capitalised) >= 2)
        raw = {"dense": 1.0 + lam + eps, "sparse": 1.0 + 2.0 * sigma, "extended": 1.0 + 0.5 * mu}
        detail = {"specificity": sigma, "length": lam, "explanatory": eps, "multi_entity": mu}
        return ChannelWeights(weights=normalise_weights(raw, channels), detail=detail)

    def refine(self, query: str, passages: Sequence[str]) -> list[Relevance]:
        wanted = {norm_word(k) for k in content_words(query)}
        out = []
        for passage in passages:
            score = len(wanted & token_set(passage)) / len(wanted) if wanted else 0.0
            out.append(Relevance(score=score, keep=score >= self.min_overlap))
        return out

    def completeness(self, query: str, passages: Sequence[str]) -> list[Completeness]:
        out = []
        for passage in passages:
            checks = completeness_checks(passage, self.min_words)
            score = 1.0 - sum(_CHECK_PENALTY[name] for name, ok in checks.items() if not ok)
            out.append(Completeness(score=min(max(score, 0.0), 1.0), detail={"checks": checks}))
        return out

    def compress(
        self, query: str, previous: str | None, center: str, following: str | None, max_tokens: int
    ) -> Compression:
        return Compression(text=extractive_stitch(previous, center, following, max_tokens))

    def elements(self, question: str) -> Elements:
        return Elements(elements=[question.strip()])

    def coverage(self, question: str, elements: Sequence[str], passages: Sequence[str]) -> Coverage:
        pooled = token_set(" ".join(passages))
        per_passage = [token_set(p) for p in passages]
        scores, best = [], []
        for element in elements:
            wanted = {norm_word(k) for k in content_words(element)}
            if not wanted:
                scores.append(1.0 if passages else 0.0)
                best.append(0 if passages else None)
                continue
            scores.append(len(wanted & pooled) / len(wanted))
            hits = [len(wanted & tokens) for tokens in per_passage]
            best.append(int(np.argmax(hits)) if hits else None)
        return Coverage(elements=list(elements), scores=scores, best=best)

    def follow_up(self, question: str, element: str, passages: Sequence[str]) -> FollowUp:
        pooled = token_set(" ".join(passages))
        missing = [k for k in content_words(element) if norm_word(k) not in pooled]
        return FollowUp(query=" ".join(missing) if missing else element.strip(), detail={"missing": missing})
