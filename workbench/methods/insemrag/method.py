"""InSemRAG — intent-aware retrieval and semantics-preserving chunking (spec ``seed-004-insemrag.md``).

A controller (:mod:`workbench.methods.controller`) makes every intermediate decision; the generator is called once,
at the end.

InSemRAG searches its **own chunked view of the corpus** by default (``chunking = "fixed"``, spec §5 / D16): every
document is rebuilt from the corpus and cut into consecutive, non-overlapping windows of ``chunk_tokens`` (64) dense-
encoder tokens, whatever ``data.chunking`` built the corpus with, so a retrieved chunk has neighbours to be repaired
from (with one passage per document — the default corpus — nothing could ever be repaired). 64 is the shortest
length of the paper's sweep (512 / 256 / 128 / 64) and what spec §12.3 recommends for short documents, so that
fragmentation actually occurs: the Wikipedia summaries average ~100 encoder tokens (512 would leave them whole).
``chunking = "corpus"`` searches the corpus rows as they are. Per question (steps as they appear in the trace):

1. ``elements`` — the controller extracts the question's key information elements once (S6; spec D7).
2. Rounds t = 1 .. ``max_rounds`` (3, paper), over the round's active queries (round 1: the question; later: the
   follow-up queries):

   * ``enrich`` (per query) — a dense paraphrase q_d and sparse keywords q_s (S1);
   * ``weights`` (per query) — a weight per retrieval channel, summing to 1 (S2);
   * ``retrieve`` (per round, one batched hybrid search) — the dense channel searches q_d, the sparse (BM25)
     channel the keywords, the optional extended channel q ⊕ q_d ⊕ keywords (spec D3); each channel returns its
     top ``candidates_per_channel``; :class:`~workbench.backends.retrievers.HybridRetriever` min-max normalises and
     fuses them with the query's weights (eq. 8) into the top ``k1`` pool E0. Fused and per-channel raw scores
     are logged;
   * ``refine`` (per query) — the controller keeps / drops each candidate with a relevance score (S3; an LM
     controller keeps iff score ≥ ``keep_threshold``); the kept ones, by score (ties: fused rank), capped at ``k``
     (k2), form Er. When the filter drops **every** candidate, Er = the top ``k`` by score (ties: fused rank), as in
     the spec's re-ranking (§7.1), counted as a fallback and flagged ``all_dropped`` in the step;
   * ``damage`` (per query) — a completeness score per kept chunk (S4); damaged iff score < ``tau``;
   * ``repair`` (per damaged chunk) — the previous and next chunk of the same document (``doc_id``, ``index`` ± 1)
     are stitched around it and the controller compresses the stitch to ``compression_length`` tokens (S5). The
     repaired chunk (``chunk_id`` ``"rep:<id>"``) replaces the damaged one; a chunk with no neighbour is kept as
     it is, flagged ``unrepairable`` and counted as a fallback (spec §20 "Neighbors");
   * ``coverage`` (per round) — the controller scores every element against the cumulative evidence (S7);
     uncovered iff score < ``gamma``. Stop when nothing is uncovered or after the last round. A repaired chunk is
     given whole (its length is already bounded by L); raw chunks are cut at ``tools.passage_chars``;
   * ``follow_up`` (per round that continues) — one new query per uncovered element (S8), at most
     ``max_follow_ups``; queries already asked are skipped, and a round with no new query stops the loop.

3. ``generate`` — exactly one generator call: the question with the cumulative evidence (round order, then
   relevance; at most ``max_final_chunks``), repaired chunks whole as in the coverage check.

Every controller decision (values, raw reply, fallback flag, note) is in its step's detail; each fallback is also
counted in ``trace.fallbacks`` with a note. The controller is the paper's prompted small LM
(:class:`~workbench.methods.controller.PromptedLMController`), a distilled student, or the model-free
:class:`~workbench.methods.controller.HeuristicController`.

What it searches — the token-window view, the hybrid retriever and the per-channel routing of the query views — is in
:mod:`workbench.methods.insemrag_retrieval` (its public names are importable from here as well).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.backends.prompts import number_chunks
from workbench.backends.retrievers import HybridRetriever
from workbench.core.errors import ConfigError
from workbench.methods.base import Answer, Method, Passage, Tools, Trace
from workbench.methods.common import generate_answers
from workbench.methods.controller import (
    ChannelWeights,
    Controller,
    Decision,
    Enrichment,
    uniform_weights,
)
from workbench.methods.insemrag.retrieval import (
    ViewChannel,
    build_hybrid_retriever,
    encoder_tokenizer,
    route_views,
    scores_by_row,
    token_window_view,
)
from workbench.methods.insemrag.settings import CHUNKINGS, InSemRAGSettings

__all__ = [
    "CHUNKINGS",
    "InSemRAG",
    "InSemRAGSettings",
    "ViewChannel",
    "build_hybrid_retriever",
    "encoder_tokenizer",
    "route_views",
    "token_window_view",
]


# ------------------------------------------------------------------------------------------------------ method
@dataclass
class _Evidence:
    """A passage of the cumulative evidence, with the round and query that brought it in."""

    passage: Passage
    round: int
    query: str
    repaired_from: str | None = None
    sources: list[str] = field(default_factory=list)


class InSemRAG(Method):
    """InSemRAG with a pluggable controller (module doc). ``retriever``: a
    :class:`~workbench.backends.retrievers.HybridRetriever` whose channels are named ``dense`` / ``sparse`` /
    ``extended`` over ``tools.corpus`` (its rows are the corpus rows; only with ``chunking = "corpus"``); None
    builds one over the method's corpus — its own token-window view (:func:`token_window_view`) by default — and
    ``tools.embedder`` with ``settings.channels``. Its channels are wrapped so each searches its own query view."""

    name = "insemrag"
    requires_gold = False

    def __init__(
        self,
        tools: Tools,
        controller: Controller,
        settings: InSemRAGSettings | None = None,
        retriever: HybridRetriever | None = None,
    ) -> None:
        settings = (settings or InSemRAGSettings()).validate()
        self.corpus_view: dict[str, Any] = {"chunking": "corpus"}
        refusal = settings.engine_refusal()
        if refusal is not None and retriever is None and tools.on_engine:
            raise ConfigError(refusal[0], f"insemrag.{refusal[1]}")
        if settings.chunking == "fixed":
            if retriever is not None:
                raise ConfigError(
                    "a given retriever searches tools.corpus as it is: set chunking to corpus", "insemrag.retriever"
                )
            tools, self.corpus_view = token_window_view(tools, settings.chunk_tokens)
        super().__init__(tools)
        own = getattr(controller, "keep_threshold", None)  # an LM controller's relevance filter
        if own is not None and float(own) != float(settings.keep_threshold):
            raise ConfigError(
                f"the controller keeps candidates at {own} but keep_threshold is {settings.keep_threshold}: "
                "give the same value to both",
                "insemrag.keep_threshold",
            )
        self.controller = controller
        self.settings = settings
        if retriever is None:
            retriever = build_hybrid_retriever(
                tools,
                self.settings.channels,
                dense_index=self.settings.dense_index,
                dense_pool=self.settings.dense_pool,
            )
        if not isinstance(retriever, HybridRetriever):
            raise ConfigError("InSemRAG needs a HybridRetriever with dense / sparse channels", "insemrag.retriever")
        self.retriever = route_views(retriever, self.settings.candidates_per_channel)
        self.channels: tuple[str, ...] = tuple(self.retriever.names)
        self._neighbours: dict[tuple[str, int], int] | None = None

    @property
    def controller_info(self) -> dict[str, Any]:
        """Which controller decides (``name``) and on which model (``model``: the reference of its generator;
        ``answering_model``: True when it is the answering model itself; both None for a model-free controller)."""
        generator = getattr(self.controller, "generator", None)
        resolved = getattr(generator, "resolved", None)
        return {
            "name": self.controller.name,
            "model": getattr(resolved, "ref", None) if generator is not None else None,
            "answering_model": (generator is self.tools.generator) if generator is not None else None,
        }

    # ------------------------------------------------------------------ helpers
    def _record(self, trace: Trace, step: dict[str, Any], key: str, decision: Decision, what: str) -> None:
        """Put a decision in the step detail; count its fallback."""
        step[key] = decision.to_dict()
        if decision.fallback:
            trace.fallback(f"controller {what}: {decision.note or 'unusable reply, fallback used'}")

    def _record_many(self, trace: Trace, decisions: Sequence[Decision], what: str) -> int:
        fallbacks = [d for d in decisions if d.fallback]
        for d in fallbacks:
            trace.fallback(f"controller {what}: {d.note or 'unusable reply, fallback used'}")
        return len(fallbacks)

    def _neighbour_rows(self, row: int) -> tuple[int | None, int | None]:
        """Corpus rows of the previous and next chunk of the same document (None where there is none)."""
        if self._neighbours is None:
            try:
                doc_ids, positions = self.tools.column("doc_id"), self.tools.column("index")
            except (KeyError, ValueError):
                doc_ids, positions = [], []
            self._neighbours = {(str(d), int(p)): i for i, (d, p) in enumerate(zip(doc_ids, positions, strict=True))}
        if not self._neighbours:
            return None, None
        key_doc, pos = str(self.tools.column("doc_id")[row]), int(self.tools.column("index")[row])
        return self._neighbours.get((key_doc, pos - 1)), self._neighbours.get((key_doc, pos + 1))

    def _evidence_text(self, evidence: _Evidence) -> str:
        """An evidence chunk as the coverage check and the final prompt see it: ``title: text``, a repaired chunk
        whole (the repair already bounded it by L tokens), a raw one cut at ``tools.passage_chars``."""
        limit = None if evidence.repaired_from is not None else self.tools.passage_chars
        return evidence.passage.prompt_text(limit)

    def query_views(self, query: str, enrichment: Enrichment) -> dict[str, str]:
        """The per-channel query texts a round retrieves with, for this method's ``channels`` (in their order).

        ``dense``: the enrichment's paraphrase (the query when empty); ``sparse``: its keywords joined by spaces
        (the query when none); ``extended``: the query, the paraphrase and the keywords, each once, in that order.
        Pure: no model call, no state change.
        """
        dense = enrichment.dense.strip() or query
        sparse = " ".join(enrichment.keywords).strip() or query
        extended = " ".join(dict.fromkeys([query.strip(), dense, sparse]))
        views = {"dense": dense, "sparse": sparse, "extended": extended}
        return {name: views[name] for name in self.channels}

    def _checked_weights(self, trace: Trace, decision: ChannelWeights) -> dict[str, float]:
        weights = decision.weights
        ok = (
            isinstance(weights, dict)
            and set(weights) <= set(self.channels)
            and all(isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in weights.values())
            and sum(weights.values()) > 0
        )
        if not ok:
            trace.fallback(f"controller weights: invalid weights {weights!r}, uniform used")
            return uniform_weights(self.channels)
        total = float(sum(weights.values()))
        return {c: float(weights.get(c, 0.0)) / total for c in self.channels}

    # ------------------------------------------------------------------ one round's steps
    def _retrieve(
        self, trace: Trace, round_: int, queries: list[str], views: list[dict[str, str]], weights: list[dict]
    ) -> list[list[Passage]]:
        s = self.settings
        with trace.step("retrieve", self.tools.counter) as step:
            composites = [json.dumps(v, sort_keys=True) for v in views]
            results = self.retriever.search(composites, k=s.k1, weights=weights)
            pools, logged = [], []
            for composite, result, query, view, weight in zip(
                composites, results, queries, views, weights, strict=True
            ):
                raw = {name: scores_by_row(ch.last[composite]) for name, ch in self.retriever.channels.items()}
                pool = [self.tools.passage(int(i), float(v)) for i, v in scores_by_row(result).items()]
                pools.append(pool)
                logged.append(
                    {
                        "query": query,
                        "views": view,
                        "weights": weight,
                        "candidates": [
                            {
                                "chunk_id": p.chunk_id,
                                "fused": p.score,
                                "channels": {name: raw[name].get(p.index) for name in self.channels},
                            }
                            for p in pool
                        ],
                    }
                )
            step.update(round=round_, k1=s.k1, per_query=logged, corpus=self.corpus_view)
        return pools

    def _refine(self, trace: Trace, round_: int, query: str, pool: list[Passage]) -> list[tuple[Passage, float]]:
        s = self.settings
        with trace.step("refine", self.tools.counter) as step:
            step.update(round=round_, query=query)
            if not s.refine:
                step["disabled"] = True
                kept = [(p, p.score) for p in pool[: s.k]]
            else:
                step["keep_threshold"] = getattr(self.controller, "keep_threshold", None)
                decisions = self.controller.refine(query, [p.prompt_text(self.tools.passage_chars) for p in pool])
                all_dropped = False
                if len(decisions) != len(pool):
                    trace.fallback(f"controller refine: {len(decisions)} verdicts for {len(pool)} candidates")
                    decisions = []
                    kept = [(p, p.score) for p in pool[: s.k]]
                else:
                    # by relevance, ties by the fused rank (the pool's order): spec §7.1 re-ranking
                    ranked = sorted(range(len(pool)), key=lambda i: (-float(decisions[i].score), i))
                    order = [i for i in ranked if decisions[i].keep]
                    all_dropped = bool(pool) and not order
                    if all_dropped:  # never silently no evidence: Er = TopK_k2(E0 by r) as the spec re-ranks
                        order = ranked
                    kept = [(pool[i], float(decisions[i].score)) for i in order[: s.k]]
                step["decisions"] = [
                    {"chunk_id": p.chunk_id, **d.to_dict()} for p, d in zip(pool, decisions, strict=False)
                ]
                step["fallbacks"] = self._record_many(trace, decisions, "refine")
                step["all_dropped"] = all_dropped
                if all_dropped:
                    note = (
                        f"controller refine: the relevance filter dropped all {len(pool)} candidates: kept the top "
                        f"{len(kept)} by relevance score"
                    )
                    trace.fallback(note)
                    step["fallbacks"] += 1
                    step["fallback_note"] = note
            step["kept"] = [p.chunk_id for p, _ in kept]
        return kept

    def _damage(self, trace: Trace, round_: int, query: str, kept: list[tuple[Passage, float]]) -> list[bool]:
        s = self.settings
        with trace.step("damage", self.tools.counter) as step:
            step.update(round=round_, query=query, tau=s.tau)
            decisions = self.controller.completeness(query, [p.text for p, _ in kept])
            if len(decisions) != len(kept):
                trace.fallback(f"controller completeness: {len(decisions)} scores for {len(kept)} chunks")
                step["chunks"] = []
                return [False] * len(kept)
            damaged = [float(d.score) < s.tau for d in decisions]
            step["chunks"] = [
                {"chunk_id": p.chunk_id, "damaged": bad, **d.to_dict()}
                for (p, _), d, bad in zip(kept, decisions, damaged, strict=True)
            ]
            step["fallbacks"] = self._record_many(trace, decisions, "completeness")
            step["damaged"] = [p.chunk_id for (p, _), bad in zip(kept, damaged, strict=True) if bad]
        return damaged

    def _repair(self, trace: Trace, round_: int, query: str, passage: Passage) -> tuple[Passage, list[str]]:
        s = self.settings
        with trace.step("repair", self.tools.counter) as step:
            prev_row, next_row = self._neighbour_rows(passage.index)
            prev = self.tools.passage(prev_row) if prev_row is not None else None
            nxt = self.tools.passage(next_row) if next_row is not None else None
            step.update(
                round=round_,
                query=query,
                chunk_id=passage.chunk_id,
                previous_id=prev.chunk_id if prev else None,
                next_id=nxt.chunk_id if nxt else None,
            )
            if prev is None and nxt is None:
                step["unrepairable"] = True
                trace.fallback(f"unrepairable chunk {passage.chunk_id}: no neighbour in its document, kept as it is")
                return passage, [passage.chunk_id]
            step["stitched"] = " ".join(x.text.strip() for x in (prev, passage, nxt) if x is not None)
            length = s.repair_length
            step["length"] = length
            decision = self.controller.compress(
                query, prev.text if prev else None, passage.text, nxt.text if nxt else None, length
            )
            self._record(trace, step, "decision", decision, "compress")
            text = " ".join(decision.text.split()[:length]).strip()
            if not text:
                trace.fallback("controller compress: empty text, damaged chunk kept")
                step["unrepairable"] = True
                return passage, [passage.chunk_id]
            step["text"] = text
            sources = [x.chunk_id for x in (prev, passage, nxt) if x is not None]
            step["sources"] = sources
            repaired = Passage(
                passage.index, f"rep:{passage.chunk_id}", passage.doc_id, passage.title, text, passage.score
            )
        return repaired, sources

    # ------------------------------------------------------------------ the question's own decisions
    def _elements(self, trace: Trace, question: str) -> list[str]:
        """The ``elements`` step: the controller's key information elements of the question (S6)."""
        with trace.step("elements", self.tools.counter) as step:
            step.update(controller=self.controller_info)
            decision = self.controller.elements(question)
            self._record(trace, step, "decision", decision, "elements")
            return list(decision.elements) or [question]

    def _query_plan(self, trace: Trace, round_: int, query: str) -> tuple[dict[str, str], dict[str, float]]:
        """The ``enrich`` and ``weights`` steps of one query: its per-channel views (S1) and channel weights (S2)."""
        s, controller, counter = self.settings, self.controller, self.tools.counter
        with trace.step("enrich", counter) as step:
            step.update(round=round_, query=query)
            if s.enrich:
                enrichment = controller.enrich(query)
                self._record(trace, step, "decision", enrichment, "enrich")
            else:
                enrichment = Enrichment(dense=query, keywords=[], note="enrichment disabled")
                step["disabled"] = True
            views = self.query_views(query, enrichment)
            step["views"] = views
        with trace.step("weights", counter) as step:
            step.update(round=round_, query=query)
            if s.dynamic_weights:
                decision = controller.channel_weights(query, self.channels)
                self._record(trace, step, "decision", decision, "weights")
                weights = self._checked_weights(trace, decision)
            else:
                step["disabled"] = True
                weights = uniform_weights(self.channels)
            step["weights"] = weights
        return views, weights

    def question_decisions(self, question: str) -> dict[str, Any]:
        """What the controller decides from the question alone, by the steps :meth:`answer` runs first (elements,
        then round 1's enrich and weights): ``{"retrieve": True, "controller", "elements", "views", "weights",
        "fallbacks"}`` (InSemRAG always retrieves in round 1; ``fallbacks``: the controller's unusable replies).
        ``workbench score`` reports it for a record's question."""
        trace = Trace(self.name)
        elements = self._elements(trace, question)
        views, weights = self._query_plan(trace, 1, question)
        return {
            "retrieve": True,
            "controller": self.controller_info["name"],
            "elements": elements,
            "views": views,
            "weights": weights,
            "fallbacks": trace.fallbacks,
        }

    # ------------------------------------------------------------------ answer
    def answer(self, example: dict[str, Any]) -> Answer:
        question = str(example["question"])
        s, controller, counter = self.settings, self.controller, self.tools.counter
        trace = Trace(self.name)
        evidence: dict[int, _Evidence] = {}  # by corpus row: a repaired chunk supersedes its raw one

        elements = self._elements(trace, question)
        queries, asked, rounds, stop = [question], {question.strip().lower()}, 0, "max_rounds"
        for round_ in range(1, s.max_rounds + 1):
            rounds = round_
            views, weights = [], []
            for query in queries:
                view, weight = self._query_plan(trace, round_, query)
                views.append(view)
                weights.append(weight)

            pools = self._retrieve(trace, round_, queries, views, weights)
            for query, pool in zip(queries, pools, strict=True):
                kept = self._refine(trace, round_, query, pool)
                damaged = self._damage(trace, round_, query, kept) if s.repair else [False] * len(kept)
                for (passage, relevance), bad in zip(kept, damaged, strict=True):
                    passage.score = relevance
                    known = evidence.get(passage.index)
                    if known is not None and known.repaired_from is not None:
                        continue  # already repaired in an earlier round or for another query
                    if bad:
                        repaired, sources = self._repair(trace, round_, query, passage)
                        if repaired is not passage:
                            evidence[passage.index] = _Evidence(repaired, round_, query, passage.chunk_id, sources)
                            continue
                    if passage.index not in evidence:
                        evidence[passage.index] = _Evidence(passage, round_, query)

            texts = [self._evidence_text(e) for e in evidence.values()]
            with trace.step("coverage", counter) as step:
                decision = controller.coverage(question, elements, texts)
                self._record(trace, step, "decision", decision, "coverage")
                if len(decision.scores) == len(decision.elements):
                    uncovered = decision.uncovered(s.gamma)
                else:
                    trace.fallback("controller coverage: scores and elements differ in number, treated as covered")
                    uncovered = []
                step.update(round=round_, gamma=s.gamma, score=decision.score, uncovered=uncovered)
                step["evidence"] = [e.passage.chunk_id for e in evidence.values()]
            if not uncovered:
                stop = "covered"
                break
            if round_ == s.max_rounds:
                break
            with trace.step("follow_up", counter) as step:
                step.update(round=round_, uncovered=uncovered)
                decisions, queries = [], []
                for element in uncovered[: s.max_follow_ups]:
                    decision = controller.follow_up(question, element, texts)
                    decisions.append({"element": element, **decision.to_dict()})
                    self._record_many(trace, [decision], "follow_up")
                    query = decision.query.strip() or element
                    if query.lower() not in asked:
                        asked.add(query.lower())
                        queries.append(query)
                step["decisions"] = decisions
                step["queries"] = queries
            if not queries:
                stop = "no_new_queries"
                break

        chosen = list(evidence.values())[: s.max_final_chunks]
        passages = [e.passage for e in chosen]
        with trace.step("generate", counter) as step:
            context = number_chunks([self._evidence_text(e) for e in chosen]) if chosen else None
            out = generate_answers(self.tools, [question], [context], max_new_tokens=s.answer_max_tokens)[0]
            step.update(
                rounds=rounds,
                stop=stop,
                ids=[p.chunk_id for p in passages],
                evidence=[
                    {"chunk_id": e.passage.chunk_id, "round": e.round, "query": e.query, "sources": e.sources}
                    for e in chosen
                ],
                prompt_tokens=out.built.n_tokens,
            )
            if out.built.truncated:
                trace.fallback("context cut to fit the model window")
        if not passages:
            trace.fallback("no evidence after refinement: answered closed-book")
        trace.retrieved = bool(passages)
        trace.passages = [p.chunk_id for p in passages]
        return Answer(out.text.strip(), trace)
