"""DRAGIN — Dynamic Retrieval Augmented Generation based on the Information Needs of LLMs (Su et al., 2024).

Per question, in rounds (at most ``max_retrievals`` retrievals):

1. ``generate`` — a greedy answer with the shared answering prompt (closed-book in round 0; later rounds with the
   last retrieval's passages), continuing the answer kept so far.
2. ``rind`` — one teacher-forced pass over prompt + answer reads the last layer's attention
   (:func:`~workbench.methods.dragin.reading.read_answer`); each word's RIND = entropy × attention influence ×
   significance (:func:`~workbench.methods.dragin.rind.rind_scores`). No word above ``threshold``: the answer is
   final. Otherwise the answer is cut before the first such word (the trigger) and
3. ``retrieve`` — QFS forms the query from the ``query_words`` question and answer words the trigger's first token
   attends to most (:func:`~workbench.methods.dragin.rind.qfs_query`); the top ``k`` passages replace the previous
   ones (as the released code does) and the next round regenerates from the cut.

The last allowed round's answer is final without a RIND pass. Generation and retrieval are batched over the
questions of a round; the attention pass runs per question (its matrix is n × n).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.backends.cost import generation_cost
from workbench.methods.base import Answer, Method, Passage, Tools, Trace, shared_step
from workbench.methods.common import context_block, prompt_for
from workbench.methods.dragin.reading import AnswerReading, read_answer
from workbench.methods.dragin.rind import (
    attention_influence,
    first_trigger,
    is_significant,
    qfs_query,
    rind_scores,
    token_groups,
    word_spans,
)
from workbench.methods.dragin.settings import DraginSettings

__all__ = ["DRAGIN", "DraginSettings", "Trigger", "find_trigger"]


@dataclass
class Trigger:
    """What RIND found in one answer: every word and its score, and, when one exceeds the threshold, its index
    ``word``, the ``cut`` (the character in the reading's text where the triggering word's first token starts) and
    the QFS ``query``."""

    words: list[str]
    scores: list[float]
    word: int | None = None
    cut: int | None = None
    query: str = ""


def find_trigger(
    reading: AnswerReading,
    entropies: Sequence[float],
    sources: Sequence[tuple[int, int]],
    settings: DraginSettings,
) -> Trigger:
    """RIND over the answer's words of ``reading`` (``entropies``: its tokens' next-token entropies, nats); on a
    trigger, QFS over the words of ``sources`` (character spans of the reading's text: the question and the answer
    kept from earlier rounds) and of this answer before the trigger, weighted by the trigger's first token's
    attention on the earlier positions. The prompt's other text (system prompt, template, passages) is no query."""
    text, p = reading.text, reading.prompt_len
    words = word_spans(text, reading.answer_start)
    groups = token_groups(reading.spans[p:], words)
    names = [text[a:b] for a, b in words]
    influence = attention_influence(reading.attention[p:, p:])
    scores = rind_scores(entropies, influence, groups, [is_significant(w) for w in names])
    found = Trigger(names, [float(s) for s in scores])
    hit = first_trigger(scores, settings.threshold)
    if hit is None or not groups[hit]:
        return found
    position = p + groups[hit][0]
    cut = reading.spans[position][0]  # before the trigger's first token (its leading space, if any, too)
    candidates = [w for a, b in sources for w in word_spans(text, a, b)] + words[:hit]
    weighed = [[t for t in g if t < position] for g in token_groups(reading.spans, candidates)]
    query = qfs_query(reading.attention[position], weighed, [text[a:b] for a, b in candidates], settings.query_words)
    found.word, found.cut, found.query = hit, cut, query
    return found


@dataclass
class _Work:
    """One question's state through the rounds."""

    question: str
    trace: Trace
    kept: str = ""  # the answer so far (cut before the last trigger)
    passages: list[Passage] = field(default_factory=list)
    text: str = ""
    query: str = ""


class DRAGIN(Method):
    """DRAGIN: generate; where a word's real-time information need (RIND) exceeds the threshold, cut the answer
    there, retrieve with the words the trigger attends to most (QFS) and regenerate from the cut with the passages.
    Needs the in-process generator (the model's attention). See the module docstring for the rounds.

    ``settings`` come validated from their source (the registry configures a recipe's or a bundle's options once;
    by hand: ``DraginSettings(...).validate()``)."""

    name = "dragin"
    requires_gold = False

    def __init__(self, tools: Tools, settings: DraginSettings = DraginSettings()) -> None:  # noqa: B008 (frozen)
        super().__init__(tools)
        self.settings = settings

    def answer(self, example: dict[str, Any]) -> Answer:
        return self.answer_many([example])[0]

    def answer_many(self, examples: Sequence[dict[str, Any]]) -> list[Answer]:
        work = [_Work(str(ex["question"]), Trace(self.name)) for ex in examples]
        active = list(work)
        for round_ in range(self.settings.max_retrievals + 1):
            if not active:
                break
            prompts, outputs = self._generate(active, round_)
            for w, out in zip(active, outputs, strict=True):
                w.text = (w.kept + out.text).strip()  # final unless RIND triggers and retrieval finds passages
            last = round_ == self.settings.max_retrievals
            active = [] if last else self._retrieve(self._rind(active, prompts, outputs, round_), round_)
        for w in work:
            w.trace.retrieved = bool(w.passages)
            w.trace.passages = [p.chunk_id for p in w.passages]
        return [Answer(w.text, w.trace) for w in work]

    def question_decision(self, question: str) -> dict[str, Any]:
        """DRAGIN's first decision on ``question`` (what ``workbench score`` reports for a logged question): round 0
        of its answers — the closed-book answer and its RIND — without retrieving. ``{retrieve, max_rind,
        threshold}`` and, when it would retrieve, the ``trigger`` word and the QFS ``query``."""
        work = _Work(question, Trace(self.name))
        prompts, outputs = self._generate([work], 0)
        self._rind([work], prompts, outputs, 0)
        detail = work.trace.find("rind").detail
        keys = ("retrieve", "max_rind", "threshold", "trigger", "query")
        return {key: detail[key] for key in keys if key in detail}

    # ------------------------------------------------------------------ rounds
    def _generate(self, work: list[_Work], round_: int) -> tuple[list[str], list[Any]]:
        """Greedy continuations of each question's kept answer, with its passages (none in round 0)."""
        tools = self.tools
        budget = self.settings.answer_max_tokens or tools.max_new_tokens
        built = [prompt_for(tools, w.question, context_block(w.passages, tools.passage_chars), budget) for w in work]
        prompts = [b.text + w.kept for b, w in zip(built, work, strict=True)]
        own: list[dict[str, float] | None] = [None] * len(work)
        with shared_step([w.trace for w in work], "generate", tools.counter, own) as details:
            outputs = tools.generator.generate(prompts, temperature=0.0, max_new_tokens=budget, stop=("\n",))
            own[:] = [generation_cost(out) for out in outputs]
            for w, out, b, detail in zip(work, outputs, built, details, strict=True):
                detail.update(round=round_, kept=w.kept, answer=out.text, prompt_tokens=b.n_tokens)
                if b.truncated:
                    w.trace.fallback("context cut to fit the model window")
        return prompts, outputs

    def _rind(self, work: list[_Work], prompts: list[str], outputs: list[Any], round_: int) -> list[_Work]:
        """RIND on each answer (one attention pass each); cut the triggered ones and return them."""
        triggered = []
        for w, prompt, out in zip(work, prompts, outputs, strict=True):
            with w.trace.step("rind", self.tools.counter) as detail:
                if len(out.token_ids) == 0:
                    detail.update(
                        round=round_, words=[], rind=[], max_rind=0.0, threshold=self.settings.threshold, retrieve=False
                    )
                    continue
                reading = read_answer(self.tools.generator, prompt, out)
                kept_at = len(prompt) - len(w.kept)
                start = prompt.rfind(w.question, 0, kept_at)
                sources = [(start, start + len(w.question))] if start >= 0 else []
                sources.append((kept_at, len(prompt)))
                found = find_trigger(reading, np.asarray(out.entropies, dtype=np.float64), sources, self.settings)
                detail.update(
                    round=round_,
                    words=found.words,
                    rind=found.scores,
                    max_rind=max(found.scores, default=0.0),
                    threshold=self.settings.threshold,
                    retrieve=found.cut is not None,
                )
                if found.cut is None:
                    continue
                detail.update(trigger=found.words[found.word], query=found.query)
                w.kept += reading.text[reading.answer_start : found.cut]
                w.query = found.query or w.question  # QFS found no significant word: the question
                triggered.append(w)
        return triggered

    def _retrieve(self, work: list[_Work], round_: int) -> list[_Work]:
        """One search for the triggered questions; returns those that found passages (the others keep their answer)."""
        if not work:
            return []
        k = self.settings.k
        with shared_step([w.trace for w in work], "retrieve", self.tools.counter) as details:
            found = self.tools.search([w.query for w in work], k)
            for w, passages, detail in zip(work, found, details, strict=True):
                detail.update(round=round_, query=w.query, ids=[p.chunk_id for p in passages])
        going = []
        for w, passages in zip(work, found, strict=True):
            if passages:
                w.passages = passages
                going.append(w)
            else:
                w.trace.fallback("retrieval returned nothing: kept the answer")
        return going
