"""DENSE-RAG: measure whether the model understands its retrieved context (DENSE) and improve the context when it does
not (adaptive semantic chunking + iterative context refinement). Spec: ``specs/seed-000-dense.md``.

Per question (spec §3):

1. ``retrieve`` — the run's retriever finds the documents 𝒟 (those of its top ``max(k, doc_pool_k)`` passages);
   𝒟 is cut into DENSE-RAG's own fixed-size chunks — LangChain-style recursive splitting into 512-character chunks
   with a 64-character overlap (spec §3 step 1, §6.1, A8), whatever chunking the corpus was built with — and the
   chunks are ranked by cosine to the question with the embedder (the paper's per-question dense index, §6.2); the
   top ``k`` form C₀. ``chunking = "corpus"`` takes the retriever's top ``k`` corpus passages as C₀ instead.
2. ``dense`` — DENSE on C₀ (:func:`~workbench.uncertainty.dense_stats.dense_stats`: each chunk rephrased alone,
   k + 1 single-edit contexts, greedy answers R₀, NLI); DSE₀ from the
   :class:`~workbench.uncertainty.features.dense.Dense` feature. DSE₀ ≤ θ → *certain*: the answer is
   SELECT_ANSWER(R₀) and nothing else runs.
3. ``semantic_chunking`` (uncertain only, §6) — the documents of 𝒟 are rebuilt from their corpus chunks (joined by
   ``index``, overlaps removed when the corpus has ``start``/``end`` offsets) and re-split by
   :class:`~workbench.data.chunkers.SemanticChunker` (Alg. 2: consecutive sentences merged while cos > τ and the
   summed sentence length ≤ T_max characters). The semantic chunks are embedded and ranked by cosine to the
   question; the top ``candidates`` form the pool P and its top ``k`` the starting context. ``SemanticChunker``
   already follows Alg. 2 / §6.4 (strict ``>``, consecutive sentences compared, joining spaces not counted, an
   oversize sentence kept whole), so it is used as is; it differs from the authors' code only in its rule-based
   sentence splitter (no NLTK Punkt) and in keeping the document's own white space between merged sentences
   (the code joins them with one space) — neither changes which sentences merge.
4. ``refine`` (one step per iteration, §7.3) — DENSE on the current context (rephrasings are reused: a per-question
   memo answers any deterministic generation it has seen), self-evaluation, best-context update, stop rule; else
   chunks are sorted into certain / necessary / unnecessary (:func:`classify_chunks`, ablation answers for the
   uncertain ones), unnecessary chunks are pruned, the unvisited pool chunk most similar to each necessary chunk is
   added (:func:`refill`) and the context is topped up to ``k`` in pool order (:func:`top_up`).
5. ``select_answer`` — SELECT_ANSWER (§4.8, :func:`select_answer`) over the reply set of the best context: the
   successful one, else the lowest-DSE context seen (sufficiency preferred).

Each chunk's rephrasing may take up to ``rephrase_length_factor`` (1.5) × the chunk's token count new tokens (spec
A7), so a rephrasing is not cut short by a fixed cap.

Recovered failures go to ``trace.fallbacks`` / ``trace.notes``: empty retrieval (closed-book answer), empty
rephrasings (original chunk kept, as ``dense_stats`` does), rephrasings cut at their length cap, an unparseable
self-evaluation reply (counted as "no", i.e. not sufficient: the spec's default 0), and prompts the generator's
prompt builder cut to fit the model window.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.backends.prompts import number_chunks
from workbench.core.errors import ConfigError
from workbench.methods.base import Answer, Method, Tools, Trace
from workbench.methods.common import ANSWER_SYSTEM, generate_answers
from workbench.methods.dense_rag.chunking import ContextChunker, PoolChunk
from workbench.methods.dense_rag.decisions import (
    CERTAIN,
    NECESSARY,
    UNNECESSARY,
    classify_chunks,
    entailment_verdicts,
    is_better,
    is_certain,
    parse_self_evaluation,
    refill,
    select_answer,
    should_stop,
    top_up,
    uncertain_positions,
)
from workbench.methods.dense_rag.memo import GenerationMemo, token_count
from workbench.methods.dense_rag.settings import DenseRAGSettings
from workbench.uncertainty.dense_stats import REPHRASE_PROMPT, dense_stats
from workbench.uncertainty.features.dense import Dense
from workbench.uncertainty.graph_math import ENTAILMENT

__all__ = ["SELF_EVAL_SYSTEM", "SELF_EVAL_TEMPLATE", "DenseRAG"]

SELF_EVAL_SYSTEM = "You judge whether reference passages are enough to answer a question. Reply with yes or no only."
SELF_EVAL_TEMPLATE = (
    "Reference passages:\n{context}\n\nQuestion: {question}\n"
    "Could someone answer this question using only the passages above? Reply with one word: yes or no."
)


@dataclass
class _DenseRun:
    """One DENSE evaluation of a context: chunk texts, replies R, directional verdicts, DSE, and how many chunks were
    rephrased for the first time in this question (``new_rephrasings``), came back empty (``fallbacks``) or were cut
    at their length cap (``capped``); ``caps`` are those new rephrasings' caps."""

    texts: list[str]
    answers: list[str]
    verdicts: np.ndarray
    dse: float
    fallbacks: int
    new_rephrasings: int
    capped: int = 0
    caps: list[int] = field(default_factory=list)


@dataclass
class _Best:
    """The best context seen during refinement."""

    ids: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    dse: float = math.inf
    flag: int = 0
    iteration: int = 0


class DenseRAG(Method):
    """DENSE-RAG (spec seed-000): DENSE triage, then adaptive semantic chunking and iterative context refinement for
    uncertain questions. Needs ``tools.judge`` (NLI for DENSE and chunk necessity) and ``tools.embedder`` (semantic
    chunking, pool ranking and refill similarity); the generator also rephrases and self-evaluates."""

    name = "dense_rag"
    requires_gold = False

    def __init__(self, tools: Tools, settings: DenseRAGSettings | None = None) -> None:
        super().__init__(tools)
        self.settings = settings or DenseRAGSettings()
        self.settings.validate()
        if tools.judge is None:
            raise ConfigError("dense_rag needs an NLI judge (tools.judge) for DENSE's answer graph", "dense_rag")
        if tools.embedder is None:
            raise ConfigError("dense_rag needs an embedder (tools.embedder) for semantic chunking", "dense_rag")
        self._chunker = ContextChunker(tools, self.settings)

    # ------------------------------------------------------------------ the method
    def answer(self, example: dict[str, Any]) -> Answer:
        s, tools = self.settings, self.tools
        question = str(example["question"])
        trace = Trace(self.name)
        memo = GenerationMemo(tools.generator)
        view = copy.copy(tools)
        view.generator = memo
        rephrased: set[str] = set()
        truncated_before = self._truncations()

        with trace.step("retrieve", tools.counter) as step:
            hits = tools.search([question], max(s.k, s.doc_pool_k))[0]
            step["documents"] = list(dict.fromkeys(p.doc_id for p in hits))
            step["chunking"] = s.chunking
            fixed = hits[: s.k] if s.chunking == "corpus" else self._chunker.fixed_chunks(question, hits, step)
            step["ids"] = [p.chunk_id for p in fixed]
            step["scores"] = [p.score for p in fixed]
        if not fixed:
            what = "retrieval returned nothing" if not hits else "the retrieved documents gave no chunk"
            trace.fallback(f"{what}: answered closed-book")
            with trace.step("generate", tools.counter) as step:
                out = generate_answers(view, [question], [None], self._answer_tokens())[0]
                step["prompt_tokens"] = out.built.n_tokens
                step["source"] = "closed_book"
            self._note_truncation(trace, truncated_before)
            return Answer(out.text.strip(), trace)

        with trace.step("dense", tools.counter) as step:
            chars = tools.passage_chars if s.chunking == "corpus" else max(tools.passage_chars, s.chunk_size)
            texts = [p.prompt_text(chars) for p in fixed]
            first = self._dense(memo, question, texts, rephrased)
            certain = is_certain(first.dse, s.theta)
            step.update(
                contexts=texts,
                dse=first.dse,
                answers=first.answers,
                certain=certain,
                theta=s.theta,
                rephrase_fallbacks=first.fallbacks,
                rephrase_caps=first.caps,
                rephrase_capped=first.capped,
            )
        self._note_rephrase_fallbacks(trace, first)
        trace.retrieved = True
        trace.passages = [p.chunk_id for p in fixed]  # replaced below when another context answers
        if certain:
            return self._finish(trace, first.answers, {"source": "fixed_context", "dse": first.dse}, truncated_before)

        with trace.step("semantic_chunking", tools.counter) as step:
            pool, vectors = self._chunker.semantic_pool(question, hits, step)
        if not pool:
            trace.fallback("semantic chunking produced no chunks: kept the fixed-chunk answer")
            return self._finish(trace, first.answers, {"source": "fixed_context", "dse": first.dse}, truncated_before)

        if not s.refine:
            with trace.step("generate", tools.counter) as step:
                start = [c.text for c in pool[: s.k]]
                out = generate_answers(view, [question], [number_chunks(start)], self._answer_tokens())[0]
                step["prompt_tokens"] = out.built.n_tokens
                step["ids"] = [c.chunk_id for c in pool[: s.k]]
                step["source"] = "semantic_chunks"
                trace.passages = list(step["ids"])
            self._note_truncation(trace, truncated_before)
            return Answer(out.text.strip(), trace)

        best, reason = self._refine(trace, memo, view, question, pool, vectors, rephrased)
        detail = {
            "source": "refined_context" if reason == "success" else "lowest_dse_context",
            "success": reason == "success",
            "stop": reason,
            "dse": best.dse,
            "flag": best.flag,
            "iteration": best.iteration,
            "ids": best.ids,
        }
        trace.passages = list(best.ids)
        return self._finish(trace, best.answers, detail, truncated_before)

    # ------------------------------------------------------------------ refinement
    def _refine(
        self,
        trace: Trace,
        memo: GenerationMemo,
        view: Tools,
        question: str,
        pool: list[PoolChunk],
        vectors: np.ndarray,
        rephrased: set[str],
    ) -> tuple[_Best, str]:
        """Spec §7.3 REFINE; returns the best context and why the loop stopped."""
        s = self.settings
        context = list(range(min(s.k, len(pool))))
        visited: set[int] = set(context)
        best = _Best()
        reason = "max_iterations"
        for iteration in range(1, s.max_iterations + 1):
            with trace.step("refine", self.tools.counter) as step:
                step["iteration"] = iteration
                step["ids"] = [pool[i].chunk_id for i in context]
                run = self._dense(memo, question, [pool[i].text for i in context], rephrased)
                step.update(
                    dse=run.dse,
                    answers=run.answers,
                    new_rephrasings=run.new_rephrasings,
                    rephrase_fallbacks=run.fallbacks,
                    rephrase_caps=run.caps,
                    rephrase_capped=run.capped,
                )
                self._note_rephrase_fallbacks(trace, run)
                flag = self._self_evaluate(trace, memo, question, run.texts, step)
                if is_better(run.dse, flag, best.dse, best.flag):
                    best = _Best(step["ids"], run.answers, run.dse, flag, iteration)
                    step["best"] = True
                stop_flag = best.flag if s.stop_flag == "best" else flag
                if should_stop(best.dse, stop_flag, s.theta, s.stop_rule):
                    reason = step["stop"] = "success"
                    break
                if visited >= set(range(len(pool))):
                    reason = step["stop"] = "pool_exhausted"
                    break
                classes = self._classify(view, question, run, step)
                step["classes"] = dict(zip(step["ids"], classes, strict=True))
                unnecessary = {i for i, c in zip(context, classes, strict=True) if c == UNNECESSARY}
                if not unnecessary and len(context) > s.k:
                    reason = step["stop"] = "all_important"
                    break
                kept = [i for i in context if i not in unnecessary]
                step["pruned"] = [pool[i].chunk_id for i in context if i in unnecessary]
                new = kept
                if s.refill_from != "none":
                    wanted = NECESSARY if s.refill_from == "necessary" else CERTAIN
                    anchors = [i for i, c in zip(context, classes, strict=True) if c == wanted]
                    if not anchors and len(kept) >= s.k:
                        reason = step["stop"] = f"no_{wanted}_chunk"
                        break
                    free = [i for i in range(len(pool)) if i not in visited]
                    added = refill(anchors, vectors, free, len(kept), s.k)
                    new = top_up(kept + added, range(len(pool)), visited | set(added), s.k)
                    step["added"] = [pool[i].chunk_id for i in added]
                    step["topped_up"] = [pool[i].chunk_id for i in new[len(kept) + len(added) :]]
                if not new or new == context:
                    reason = step["stop"] = "empty_context" if not new else "unchanged"
                    break
                visited |= set(new)
                context = new
        if reason == "max_iterations":
            trace.steps[-1].detail["stop"] = reason
        return best, reason

    def _classify(self, view: Tools, question: str, run: _DenseRun, step: dict[str, Any]) -> list[str]:
        """Chunk classes of one DENSE run: ablation answers (one batched call) and their NLI against r₀."""
        positions = uncertain_positions(run.verdicts)
        ablation: dict[int, tuple[bool, bool]] = {}
        if positions:
            contexts = [run.texts[:p] + run.texts[p + 1 :] for p in positions]
            blocks = [number_chunks(c) if c else None for c in contexts]
            outs = generate_answers(view, [question] * len(positions), blocks, self._answer_tokens())
            ablated = [o.text.strip() for o in outs]
            step["ablation_answers"] = dict(zip((step["ids"][p] for p in positions), ablated, strict=True))
            r0 = run.answers[0]
            asked = [a for a in ablated if a != r0]  # equal strings entail without a call, as in dense_stats
            judged: dict[str, tuple[bool, bool]] = {}
            if asked:
                distinct = list(dict.fromkeys(asked))
                probs = self.tools.judge.entail(
                    [r0] * len(distinct) + distinct, distinct + [r0] * len(distinct), question
                )
                verdict = np.asarray(probs).argmax(axis=-1) == ENTAILMENT
                n = len(distinct)
                judged = {a: (bool(verdict[i]), bool(verdict[n + i])) for i, a in enumerate(distinct)}
            for p, a in zip(positions, ablated, strict=True):
                ablation[p] = (True, True) if a == r0 else judged[a]
        return classify_chunks(run.verdicts, ablation, self.settings.necessity_rule)

    def _self_evaluate(
        self, trace: Trace, memo: GenerationMemo, question: str, texts: list[str], step: dict[str, Any]
    ) -> int:
        """Flag_eval: 1 when the generator says the (original, un-rephrased) context suffices (spec §5.3)."""
        if not self.settings.self_evaluation:
            step["self_eval"] = None
            return 1  # the ablation "w/o self-evaluation": DSE alone decides the best context and the stop
        budget = self.settings.self_eval_max_new_tokens
        built = memo.build_prompt(
            question, number_chunks(texts), SELF_EVAL_TEMPLATE, max_new_tokens=budget, system=SELF_EVAL_SYSTEM
        )
        reply = memo.generate([built.text], temperature=0.0, max_new_tokens=budget, stop=("\n",))[0].text.strip()
        parsed = parse_self_evaluation(reply)
        step["self_eval"] = {"reply": reply, "flag": parsed}
        if parsed is None:
            trace.fallback(f"self-evaluation reply unparseable ({reply[:40]!r}): counted as 'no' (not sufficient)")
            return 0
        return parsed

    # ------------------------------------------------------------------ DENSE
    def _dense(self, memo: GenerationMemo, question: str, texts: list[str], rephrased: set[str]) -> _DenseRun:
        """DENSE on one context via ``dense_stats``; DSE by the ``Dense`` feature (eq. 6). Each chunk's rephrasing
        is capped at :meth:`DenseRAGSettings.rephrase_cap` of its own token count (registered with the memo)."""
        s = self.settings
        chats = {c: memo.render_chat(REPHRASE_PROMPT.format(chunk=c)) for c in dict.fromkeys(texts)}
        caps = {c: s.rephrase_cap(token_count(self.tools.generator, c)) for c in chats}
        memo.rephrase_caps.update({chats[c]: caps[c] for c in chats})
        row = dense_stats(
            [question],
            [texts],
            generator=memo,
            judge=self.tools.judge,
            system=ANSWER_SYSTEM,
            settings=s.dense_settings(self._answer_tokens(), max(caps.values(), default=1)),
        )[0]
        new = [c for c in dict.fromkeys(texts) if c not in rephrased]
        rephrasing = dict(zip(texts, row["dense_rephrased"], strict=True))
        rephrased.update(texts)
        probs = np.asarray(row["dense_nli_probs"], dtype=float)
        dse = Dense(rule=s.adjacency_rule).raw(row)
        kept_original = sum(1 for c in new if rephrasing[c] == c)  # noted once per chunk and question
        capped = sum(1 for c in new if memo.cut.get(chats[c], False))
        return _DenseRun(
            texts,
            list(row["dense_answers"]),
            entailment_verdicts(probs),
            dse,
            kept_original,
            len(new),
            capped=capped,
            caps=[caps[c] for c in new],
        )

    def triage(self, question: str, texts: list[str]) -> dict[str, Any]:
        """DENSE's triage of a given context (the chunk ``texts``, as the ``dense`` step's ``contexts``) for
        ``question``, as :meth:`answer` makes it: ``{"refine": not certain, "score": DSE₀, "theta": θ}`` (``refine``:
        semantic chunking and refinement would run). ``workbench score`` decides with it from a record's contexts."""
        run = self._dense(GenerationMemo(self.tools.generator), question, list(texts), set())
        return {"refine": not is_certain(run.dse, self.settings.theta), "score": run.dse, "theta": self.settings.theta}

    # ------------------------------------------------------------------ helpers
    def _answer_tokens(self) -> int:
        return self.settings.answer_max_new_tokens or self.tools.max_new_tokens

    def _truncations(self) -> int:
        counter = getattr(self.tools.generator, "counter", None)
        return int(getattr(counter, "truncated_prompts", 0) or 0)

    def _note_truncation(self, trace: Trace, before: int) -> None:
        cut = self._truncations() - before
        if cut > 0:
            trace.fallback(f"{cut} prompt(s) cut to fit the model window (the prompt builder dropped context tokens)")

    @staticmethod
    def _note_rephrase_fallbacks(trace: Trace, run: _DenseRun) -> None:
        if run.fallbacks:
            trace.fallback(f"{run.fallbacks} rephrasing(s) came back empty or unchanged: the original chunk was kept")
        if run.capped:
            trace.fallback(f"{run.capped} rephrasing(s) cut at their length cap: part of the chunk may be missing")

    def _finish(self, trace: Trace, answers: list[str], detail: dict[str, Any], truncated_before: int) -> Answer:
        with trace.step("select_answer", self.tools.counter) as step:
            text = select_answer(answers)
            step.update(detail)
            step["answer"] = text
            step["r0"] = answers[0] if answers else ""
        self._note_truncation(trace, truncated_before)
        return Answer(text, trace)
