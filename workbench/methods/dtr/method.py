"""DTR — Decide Then Retrieve (spec ``seed-002-dtr.md``): uncertainty-guided triggering, dual-path retrieval and
adaptive information selection.

Per question:

1. ``closed_book`` — greedy closed-book answer (the shared answering prompt of ``collect``, so a τ tuned on collected
   ``dtr_nll`` values applies as is); its normalised NLL u by the :class:`~workbench.uncertainty.features.dtr.DtrNll`
   feature (eq. 3). Retrieve iff ``u ≥ τ`` (spec §10.4); otherwise the closed-book answer is the output. An answer
   that is empty after stripping has u = +inf: it is treated as uncertain and retrieves (spec §10.3).
2. ``pseudo_context`` — the same LM writes a short passage answering the question (greedy, capped at
   ``pseudo_max_tokens``).
3. ``retrieve`` — two searches of a **dense** index (spec §3.4, §6.2: "dense only; no BM25 anywhere"), top ``n`` for
   the question and top ``n`` for the pseudo-context; the union (duplicates merged) holds at most ``2n`` candidates
   (:func:`merge_candidates`). The index is exact inner product over ``tools.embedder``'s vectors of the whole
   corpus by default (``retriever = "dense"``, ``dense_index = "full"``), whatever retriever the run uses for the
   other methods; ``retriever = "run"`` searches ``tools.retriever`` instead (e.g. the run's BM25).
4. ``select`` — s1 = cos(d, q), s2 = cos(d, p) with the embedder; score by ``cos_sum`` (paper, eq. 7:
   cos(θ1 + θ2)) or ``score_sum`` (authors' code: s1 + s2) (:func:`selection_scores`); keep the top ``k``.
5. ``generate`` — greedy answer with the ``k`` kept passages, in descending score.

:meth:`DTR.answer_many` batches every stage over the questions: one closed-book generate call, one pseudo-context
call for the questions that retrieve, one retrieval call per path, one embedding call and one final generate call.
Each question's trace holds its own cost of every batched stage — its prompt's LM call and tokens, its queries
(:func:`~workbench.methods.base.shared_step` with :func:`~workbench.backends.cost.generation_cost`) — so what a
question costs does not depend on which other questions retrieve with it (a study's τ replay sums these costs); a
stage whose parts do not add up to what the counter measured (a prompt two questions share) is split evenly and its
steps say so (``split``). Wall time is each question's even share of a batched stage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.backends.cost import generation_cost
from workbench.core.errors import ConfigError
from workbench.methods.base import Answer, Method, Passage, Tools, Trace, shared_step
from workbench.methods.common import context_block, generate_answers
from workbench.methods.dtr.rule import decide
from workbench.methods.dtr.settings import (
    PSEUDO_CONTEXT_PROMPT,
    RETRIEVERS,
    RULES,
    DTRSettings,
)
from workbench.uncertainty.features.dtr import DtrNll

__all__ = [
    "DTR",
    "PSEUDO_CONTEXT_PROMPT",
    "RETRIEVERS",
    "RULES",
    "Candidate",
    "DTRSettings",
    "cosine_similarities",
    "merge_candidates",
    "nll_of",
    "select_top_k",
    "selection_scores",
]


# ---------------------------------------------------------------------------------------------- pure functions
def nll_of(generation: Any, include_eos: bool) -> float:
    """The normalised NLL u of a greedy answer, by the :class:`DtrNll` feature (EOS entry appended when present).

    An answer whose text is empty after stripping gives u = +inf (treated as uncertain: DTR retrieves; spec §10.3).
    """
    if not generation.text.strip():
        return math.inf
    logprobs = [float(v) for v in generation.logprobs]
    eos = getattr(generation, "eos_logprob", None)
    ends_with_eos = generation.finish_reason == "eos" and eos is not None
    stats = {"greedy_logprobs": [*logprobs, float(eos)] if ends_with_eos else logprobs, "greedy_eos": ends_with_eos}
    return DtrNll(include_eos=include_eos).raw(stats)


@dataclass
class Candidate:
    """One passage of the dual-path union: the passage, its 0-based rank and retriever score on each path (None
    where that path did not find it)."""

    passage: Passage
    query_rank: int | None = None
    query_score: float | None = None
    pseudo_rank: int | None = None
    pseudo_score: float | None = None

    @property
    def paths(self) -> list[str]:
        """The paths that found it (``"query"``, ``"pseudo"``)."""
        return [name for name, rank in (("query", self.query_rank), ("pseudo", self.pseudo_rank)) if rank is not None]

    @property
    def best_rank(self) -> int:
        """Its best rank over both paths (the first tie-breaker after the score)."""
        return min(r for r in (self.query_rank, self.pseudo_rank) if r is not None)


def merge_candidates(query_hits: Sequence[Passage], pseudo_hits: Sequence[Passage]) -> list[Candidate]:
    """The ordered union of the two paths' hits: query hits in rank order, then pseudo-context-only hits.

    Duplicates (same corpus row) are merged into one candidate that keeps both ranks and scores (spec §9 item 8:
    the pool may hold fewer than 2n passages).
    """
    merged: dict[int, Candidate] = {}
    for rank, passage in enumerate(query_hits):
        if passage.index not in merged:
            merged[passage.index] = Candidate(passage, query_rank=rank, query_score=float(passage.score))
    for rank, passage in enumerate(pseudo_hits):
        cand = merged.setdefault(passage.index, Candidate(passage))
        if cand.pseudo_rank is None:
            cand.pseudo_rank, cand.pseudo_score = rank, float(passage.score)
    return list(merged.values())


def _unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def cosine_similarities(
    q_vec: np.ndarray, p_vec: np.ndarray | None, cand_vecs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(s1, s2): cosines of each candidate row with the query and with the pseudo-context, clipped to [−1, 1].

    Vectors are L2-normalised here, so any length works. ``p_vec=None`` (no pseudo-context) uses the query in its
    place, so s2 = s1 and both rules rank by s1 alone.
    """
    cands = _unit(np.asarray(cand_vecs, dtype=np.float64).reshape(-1, np.asarray(q_vec).shape[-1]))
    q = _unit(q_vec)
    p = q if p_vec is None else _unit(p_vec)
    s1 = np.clip(cands @ q, -1.0, 1.0)
    s2 = np.clip(cands @ p, -1.0, 1.0)
    return s1, s2


def combine(s1: np.ndarray, s2: np.ndarray, rule: str) -> np.ndarray:
    """The selection score from the two similarities.

    ``score_sum``: s1 + s2. ``cos_sum``: cos(θ1 + θ2) = s1·s2 − √(1−s1²)·√(1−s2²) with θi = arccos si, while
    θ1 + θ2 ≤ π; beyond π (two strongly negative similarities) eq. 7 would wrap around and rise again, so it is
    continued as −1 − (θ1 + θ2 − π), which keeps the score strictly decreasing in the angle sum (spec §10.2).
    """
    s1 = np.clip(np.asarray(s1, dtype=np.float64), -1.0, 1.0)
    s2 = np.clip(np.asarray(s2, dtype=np.float64), -1.0, 1.0)
    if rule == "score_sum":
        return s1 + s2
    if rule == "cos_sum":
        angle = np.arccos(s1) + np.arccos(s2)
        eq7 = s1 * s2 - np.sqrt(1.0 - s1**2) * np.sqrt(1.0 - s2**2)
        return np.where(angle <= math.pi, eq7, -1.0 - (angle - math.pi))
    raise ConfigError(f"unknown selection rule {rule!r}; use one of {', '.join(RULES)}", "dtr.rule")


def selection_scores(q_vec: np.ndarray, p_vec: np.ndarray | None, cand_vecs: np.ndarray, rule: str) -> np.ndarray:
    """Adaptive-information-selection scores of the candidate rows (higher = keep); see :func:`combine`."""
    s1, s2 = cosine_similarities(q_vec, p_vec, cand_vecs)
    return combine(s1, s2, rule)


def select_top_k(candidates: Sequence[Candidate], scores: Sequence[float], k: int) -> list[int]:
    """Positions of the ``k`` best candidates, best first: score descending, then best rank on either path, then
    chunk id (a deterministic order, spec §3.5.4). Scores equal to 12 decimals count as ties (float noise)."""
    order = sorted(
        range(len(candidates)),
        key=lambda i: (-round(float(scores[i]), 12), candidates[i].best_rank, candidates[i].passage.chunk_id),
    )
    return order[:k]


# ---------------------------------------------------------------------------------------------- the method
@dataclass
class _Work:
    """One question's state through the batch."""

    question: str
    trace: Trace
    closed_book: str = ""
    pseudo: str = ""
    query_hits: list[Passage] = field(default_factory=list)
    pseudo_hits: list[Passage] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    kept: list[Passage] = field(default_factory=list)
    text: str = ""


class DTR(Method):
    """Decide Then Retrieve: answer closed-book when the answer's normalised NLL is below τ, otherwise answer with
    the top ``k`` of a dual-path (question + pseudo-context) retrieval re-scored by adaptive information selection.

    Needs ``tools.embedder`` (selection scores and the dense index). ``retriever``: what both paths search (any
    object with ``search(queries, k)`` returning corpus rows of ``tools.corpus``); None takes the one
    ``settings.retriever`` / ``dense_index`` name (a dense index over ``tools.corpus`` by default, shared with other
    methods built on the same tools). See the module docstring for the steps.

    ``settings`` come validated from their source (the registry configures a recipe's or a bundle's options once;
    by hand: ``DTRSettings(...).validate()``): the constructor does not check them again.
    """

    name = "dtr"
    requires_gold = False

    def __init__(
        self,
        tools: Tools,
        settings: DTRSettings = DTRSettings(),  # noqa: B008 (frozen: immutable)
        retriever: Any = None,
    ) -> None:
        super().__init__(tools)
        self.settings = settings
        if tools.embedder is None:
            raise ConfigError("DTR's adaptive information selection needs an embedder (tools.embedder)", "dtr")
        self._retriever = retriever

    @property
    def retriever(self) -> Any:
        """The retriever both paths search (built on first use: a full dense index embeds the whole corpus)."""
        if self._retriever is None:
            s = self.settings
            if s.retriever == "run":
                self._retriever = self.tools.retriever
            else:
                self._retriever = self.tools.dense_retriever(s.dense_index, s.dense_pool)
        return self._retriever

    def _search(self, queries: list[str], k: int) -> list[list[Passage]]:
        results = self.retriever.search(list(queries), k=k)
        tools = self.tools
        return [[tools.passage(int(i), float(v)) for i, v in zip(r.indices, r.scores, strict=True)] for r in results]

    def answer(self, example: dict[str, Any]) -> Answer:
        return self.answer_many([example])[0]

    def answer_many(self, examples: Sequence[dict[str, Any]]) -> list[Answer]:
        work = [_Work(str(ex["question"]), Trace(self.name)) for ex in examples]
        if not work:
            return []
        retrieving = self._closed_book(work)
        pseudo_ok = self._pseudo_context(retrieving)
        with_hits = self._retrieve(retrieving, pseudo_ok)
        self._select(with_hits)
        self._generate(with_hits)
        return [Answer(w.text, w.trace) for w in work]

    # ------------------------------------------------------------------ stages
    def _closed_book(self, work: list[_Work]) -> list[_Work]:
        """Greedy closed-book answers, u, and the decision; returns the questions that retrieve."""
        s, tools = self.settings, self.tools
        retrieving = []
        own: list[dict[str, float] | None] = [None] * len(work)
        with shared_step([w.trace for w in work], "closed_book", tools.counter, own) as details:
            outputs = generate_answers(tools, [w.question for w in work], [None] * len(work), s.answer_max_tokens)
            own[:] = [generation_cost(out) for out in outputs]
            for w, out, detail in zip(work, outputs, details, strict=True):
                w.closed_book = w.text = out.text.strip()
                nll = {eos: nll_of(out, eos) for eos in (False, True)}
                u = nll[s.include_eos]
                retrieve = bool(decide(u, s.tau))
                detail.update(
                    answer=w.closed_book,
                    nll=u,
                    nll_without_eos=nll[False],
                    nll_with_eos=nll[True],
                    include_eos=s.include_eos,
                    tokens=len(out.logprobs),
                    finish_reason=out.finish_reason,
                    prompt_tokens=out.built.n_tokens,
                    tau=s.tau,
                    retrieve=retrieve,
                )
                if retrieve:
                    retrieving.append(w)
        return retrieving

    def _pseudo_context(self, work: list[_Work]) -> list[_Work]:
        """Pseudo-contexts for the retrieving questions; returns those with a non-empty one."""
        if not work:
            return []
        gen, s = self.tools.generator, self.settings
        prompts = [gen.render_chat(PSEUDO_CONTEXT_PROMPT.format(question=w.question)) for w in work]
        ok = []
        own: list[dict[str, float] | None] = [None] * len(work)
        with shared_step([w.trace for w in work], "pseudo_context", self.tools.counter, own) as details:
            outputs = gen.generate(prompts, temperature=0.0, max_new_tokens=s.pseudo_max_tokens, stop=None)
            own[:] = [generation_cost(out) for out in outputs]
            for w, out, detail in zip(work, outputs, details, strict=True):
                w.pseudo = out.text.strip()
                detail.update(
                    text=w.pseudo,
                    tokens=len(out.logprobs),
                    capped=out.finish_reason == "length",
                    max_tokens=s.pseudo_max_tokens,
                )
                if w.pseudo:
                    ok.append(w)
                else:
                    w.trace.fallback("empty pseudo-context: retrieved with the question only")
        return ok

    def _retrieve(self, work: list[_Work], pseudo_ok: list[_Work]) -> list[_Work]:
        """Both searches (one call per path for the batch); returns the questions with at least one hit."""
        if not work:
            return []
        n, tools = self.settings.n_per_path, self.tools
        retriever = self.retriever  # built before the step: a first full dense index is not a retrieval cost
        kind = type(retriever).__name__
        with_pseudo = {id(w) for w in pseudo_ok}
        own = [{"retrieval_calls": 1.0 + (id(w) in with_pseudo)} for w in work]  # one query per path it searched
        with shared_step([w.trace for w in work], "retrieve", tools.counter, own) as details:
            for w, hits in zip(work, self._search([w.question for w in work], n), strict=True):
                w.query_hits = hits
            if pseudo_ok:
                for w, hits in zip(pseudo_ok, self._search([w.pseudo for w in pseudo_ok], n), strict=True):
                    w.pseudo_hits = hits
            for w, detail in zip(work, details, strict=True):
                detail.update(
                    retriever=kind,
                    queries={"query": w.question, "pseudo": w.pseudo or None},
                    n=n,
                    query_ids=[p.chunk_id for p in w.query_hits],
                    query_scores=[p.score for p in w.query_hits],
                    pseudo_ids=[p.chunk_id for p in w.pseudo_hits],
                    pseudo_scores=[p.score for p in w.pseudo_hits],
                )
        with_hits = []
        for w in work:
            w.candidates = merge_candidates(w.query_hits, w.pseudo_hits)
            if w.candidates:
                with_hits.append(w)
            else:
                w.trace.fallback("retrieval returned nothing on either path: kept the closed-book answer")
        return with_hits

    def _passage_text(self, passage: Passage) -> str:
        return f"{passage.title}: {passage.text}" if self.settings.embed_titles else passage.text

    def _select(self, work: list[_Work]) -> None:
        """Embed questions, pseudo-contexts and candidates (one encode call); keep the top k by the rule."""
        if not work:
            return
        s = self.settings
        texts: dict[str, None] = {}
        for w in work:
            texts[w.question] = None
            if w.pseudo:
                texts[w.pseudo] = None
            for c in w.candidates:
                texts[self._passage_text(c.passage)] = None
        with shared_step([w.trace for w in work], "select", self.tools.counter) as details:
            unique = list(texts)
            matrix = np.asarray(self.tools.embedder.encode(unique), dtype=np.float64)
            row = {text: i for i, text in enumerate(unique)}
            for w, detail in zip(work, details, strict=True):
                q_vec = matrix[row[w.question]]
                p_vec = matrix[row[w.pseudo]] if w.pseudo else None
                cand_vecs = matrix[[row[self._passage_text(c.passage)] for c in w.candidates]]
                s1, s2 = cosine_similarities(q_vec, p_vec, cand_vecs)
                scores = combine(s1, s2, s.rule)
                keep = select_top_k(w.candidates, scores, s.k)
                w.kept = [w.candidates[i].passage for i in keep]
                detail.update(
                    rule=s.rule,
                    k=s.k,
                    candidates=[
                        {
                            "id": c.passage.chunk_id,
                            "paths": c.paths,
                            "query_rank": c.query_rank,
                            "pseudo_rank": c.pseudo_rank,
                            "s1": float(s1[i]),
                            "s2": float(s2[i]),
                            "score": float(scores[i]),
                        }
                        for i, c in enumerate(w.candidates)
                    ],
                    kept_ids=[p.chunk_id for p in w.kept],
                    kept_scores=[float(scores[i]) for i in keep],
                )

    def _generate(self, work: list[_Work]) -> None:
        """The final greedy answers with the kept passages (descending score), one generate call."""
        if not work:
            return
        tools = self.tools
        contexts = [context_block(w.kept, tools.passage_chars) for w in work]
        own: list[dict[str, float] | None] = [None] * len(work)
        with shared_step([w.trace for w in work], "generate", tools.counter, own) as details:
            outputs = generate_answers(tools, [w.question for w in work], contexts, self.settings.answer_max_tokens)
            own[:] = [generation_cost(out) for out in outputs]
            for w, out, detail in zip(work, outputs, details, strict=True):
                w.text = out.text.strip()
                w.trace.retrieved = True
                w.trace.passages = [p.chunk_id for p in w.kept]
                detail.update(answer=w.text, kept_ids=[p.chunk_id for p in w.kept], prompt_tokens=out.built.n_tokens)
                if out.built.truncated:
                    w.trace.fallback("context cut to fit the model window")
