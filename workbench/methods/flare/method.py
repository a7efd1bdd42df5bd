"""FLARE — Forward-Looking Active REtrieval augmented generation, FLARE-direct (Jiang et al., 2023, §3.2).

Per question, sentence by sentence until the answer is complete (an end of text or newline, the answer's token
budget, or ``max_sentences``):

1. ``look_ahead`` — greedy continuation of the answer so far, closed-book (ŝ_t = LM([x, y_<t])), cut at its first
   sentence end (:func:`~workbench.methods.active_retrieval.first_sentence`); its lowest token probability decides
   (:func:`~workbench.methods.flare.rule.decide`: retrieve iff some token has ``p < θ``). A confident sentence is
   accepted as it is.
2. ``retrieve`` — otherwise the query is the look-ahead sentence with its tokens of ``p < β`` left out
   (:func:`~workbench.methods.active_retrieval.masked_query`; the question in front of it with
   ``prepend_question``; the question alone, noted as a fallback, when every token is masked), top ``k`` passages.
3. ``regenerate`` — the sentence again, greedy, with those passages in the answering prompt (y_t = LM([D_qt, x,
   y_<t])), cut at its first sentence end; it replaces the look-ahead sentence.

Our answers are short (16 tokens, stopping at a newline), so the first look-ahead is usually the whole answer and
FLARE makes one decision per question: it equals the closed-book answer (same prompt, budget and stop) when
confident, otherwise a masked-answer query and a regenerated answer. Each round batches the questions still
answering: one generate call per stage and budget, one retrieval call. Each question's trace holds its own cost of
every batched stage (:func:`~workbench.methods.base.shared_step` with :func:`~workbench.backends.cost.generation_cost`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.backends.cost import generation_cost
from workbench.methods.active_retrieval import (
    Sentence,
    continue_answers,
    first_sentence,
    masked_query,
    min_token_prob,
    tokenizer_of,
)
from workbench.methods.base import Answer, Method, Passage, Tools, Trace, shared_step
from workbench.methods.common import context_block
from workbench.methods.flare.rule import decide
from workbench.methods.flare.settings import FLARESettings

__all__ = ["FLARE", "FLARESettings"]


@dataclass
class _Work:
    """One question's state through the sentence loop."""

    question: str
    trace: Trace
    budget: int
    answer: str = ""
    used: int = 0
    retrievals: int = 0
    done: bool = False
    passages: list[str] = field(default_factory=list)
    look: Sentence | None = None
    look_finish: str = ""
    query: str = ""
    hits: list[Passage] = field(default_factory=list)

    @property
    def left(self) -> int:
        """Tokens of the answer's budget not spent yet."""
        return self.budget - self.used


class FLARE(Method):
    """FLARE-direct: look one sentence ahead closed-book; retrieve with the sentence's confident tokens and
    regenerate it when any of its tokens is below θ. See the module docstring for the steps.

    Needs the generator's per-token log-probabilities and its tokenizer (sentence cuts and masking read token
    texts): a served model without a tokenizer is refused in one line here. ``settings`` come validated from their
    source (the registry configures a recipe's or a bundle's options once; by hand: ``FLARESettings(...)
    .validate()``)."""

    name = "flare"
    requires_gold = False

    def __init__(self, tools: Tools, settings: FLARESettings = FLARESettings()) -> None:  # noqa: B008 (frozen)
        super().__init__(tools)
        self.settings = settings
        self._decode = tokenizer_of(tools, self.name)

    def answer(self, example: dict[str, Any]) -> Answer:
        return self.answer_many([example])[0]

    def answer_many(self, examples: Sequence[dict[str, Any]]) -> list[Answer]:
        budget = self.settings.answer_max_tokens or self.tools.max_new_tokens
        work = [_Work(str(ex["question"]), Trace(self.name), budget) for ex in examples]
        for sentence in range(self.settings.max_sentences):
            active = [w for w in work if not w.done]
            if not active:
                break
            retrieving = self._look_ahead(active, sentence)
            found = self._retrieve(retrieving, sentence)
            self._regenerate(found, sentence)
        answers = []
        for w in work:
            w.trace.retrieved = bool(w.passages)
            w.trace.passages = list(dict.fromkeys(w.passages))
            answers.append(Answer(w.answer.strip(), w.trace))
        return answers

    # ------------------------------------------------------------------ stages
    def _accept(self, w: _Work, sentence: Sentence, finish_reason: str) -> None:
        """Append ``sentence`` to the answer; the answer is done at its end (EOS or newline), when the budget is
        spent, or on an empty sentence."""
        w.answer += sentence.text
        w.used += len(sentence.token_ids)
        ended = sentence.whole and finish_reason != "length"
        if ended or not sentence.text.strip() or w.left <= 0:
            w.done = True

    def _sentence_budget(self, w: _Work) -> int:
        """Tokens one sentence may take: ``look_ahead_tokens``, within what is left of the answer's budget."""
        return min(w.left, self.settings.look_ahead_tokens or w.left)

    def _look_ahead(self, work: list[_Work], sentence: int) -> list[_Work]:
        """The closed-book next sentence of each answer and the decision; returns the questions that retrieve."""
        s = self.settings
        budgets = [self._sentence_budget(w) for w in work]
        retrieving = []
        own: list[dict[str, float] | None] = [None] * len(work)
        with shared_step([w.trace for w in work], "look_ahead", self.tools.counter, own) as details:
            outputs = continue_answers(
                self.tools, [w.question for w in work], [None] * len(work), [w.answer for w in work], budgets
            )
            own[:] = [generation_cost(out) for out in outputs]
            for w, out, detail in zip(work, outputs, details, strict=True):
                look = first_sentence(out, self._decode)
                lowest = min_token_prob(look.logprobs)
                allowed = s.max_retrievals is None or w.retrievals < s.max_retrievals
                retrieve = bool(decide(lowest, s.theta)) and allowed
                detail.update(
                    sentence=sentence,
                    text=look.text,
                    tokens=len(look.token_ids),
                    min_prob=lowest,
                    theta=s.theta,
                    retrieve=retrieve,
                )
                if not allowed and decide(lowest, s.theta):
                    detail["capped"] = True  # uncertain, but max_retrievals is spent
                if retrieve:
                    w.look, w.look_finish = look, out.finish_reason
                    retrieving.append(w)
                else:
                    self._accept(w, look, out.finish_reason)
        return retrieving

    def _query(self, w: _Work) -> str:
        """The masked look-ahead sentence (question in front with ``prepend_question``); the question alone when
        every token was masked."""
        assert w.look is not None
        masked = masked_query(w.look.token_ids, w.look.logprobs, self.settings.beta, self._decode)
        if not masked:
            w.trace.fallback("the masked look-ahead sentence is empty: searched with the question")
            return w.question
        return f"{w.question} {masked}" if self.settings.prepend_question else masked

    def _retrieve(self, work: list[_Work], sentence: int) -> list[_Work]:
        """One batched search with the masked queries; returns the questions with hits (the others keep their
        look-ahead sentence)."""
        if not work:
            return []
        k = self.settings.k
        for w in work:
            w.query = self._query(w)
        own: list[dict[str, float] | None] = [{"retrieval_calls": 1.0} for _ in work]
        with shared_step([w.trace for w in work], "retrieve", self.tools.counter, own) as details:
            found = self.tools.search([w.query for w in work], k)
            for w, hits, detail in zip(work, found, details, strict=True):
                w.hits = hits
                w.retrievals += 1
                detail.update(
                    sentence=sentence,
                    query=w.query,
                    beta=self.settings.beta,
                    k=k,
                    ids=[p.chunk_id for p in hits],
                    scores=[p.score for p in hits],
                )
        with_hits = []
        for w in work:
            if w.hits:
                with_hits.append(w)
            else:
                assert w.look is not None
                w.trace.fallback("retrieval returned nothing: kept the look-ahead sentence")
                self._accept(w, w.look, w.look_finish)
        return with_hits

    def _regenerate(self, work: list[_Work], sentence: int) -> None:
        """The next sentence again with the retrieved passages in the prompt (one generate call per budget)."""
        if not work:
            return
        tools = self.tools
        contexts = [context_block(w.hits, tools.passage_chars) for w in work]
        own: list[dict[str, float] | None] = [None] * len(work)
        with shared_step([w.trace for w in work], "regenerate", tools.counter, own) as details:
            outputs = continue_answers(
                tools,
                [w.question for w in work],
                contexts,
                [w.answer for w in work],
                [self._sentence_budget(w) for w in work],
            )
            own[:] = [generation_cost(out) for out in outputs]
            for w, out, detail in zip(work, outputs, details, strict=True):
                regenerated = first_sentence(out, self._decode)
                detail.update(
                    sentence=sentence,
                    text=regenerated.text,
                    tokens=len(regenerated.token_ids),
                    ids=[p.chunk_id for p in w.hits],
                    prompt_tokens=out.built.n_tokens,
                )
                if out.built.truncated:
                    w.trace.fallback("context cut to fit the model window")
                w.passages += [p.chunk_id for p in w.hits]
                self._accept(w, regenerated, out.finish_reason)
