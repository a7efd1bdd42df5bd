"""Baselines in the same engine: No-RAG, Standard RAG (always retrieve top-k), and oracle routing.

:class:`OracleRouting` reads the gold answers (``requires_gold = True``): it answers closed-book and retrieves only
when that answer is wrong — an upper bound for any retrieval decision, for evaluation only, never in a bundle.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

from workbench.methods.base import Answer, Method, Tools, Trace, shared_step
from workbench.methods.common import context_block, generate_answers
from workbench.metrics.qa import score_answer


def _note_truncation(trace: Trace, output: Any) -> None:
    if getattr(output, "built", None) is not None and output.built.truncated:
        trace.fallback("context cut to fit the model window")


class _BatchedBaseline(Method):
    """A baseline that answers a batch of questions at once: :meth:`answer` is :meth:`answer_many` of one, and
    subclasses implement :meth:`_answer_batch` over the questions and a fresh trace per question."""

    def answer(self, example: dict[str, Any]) -> Answer:
        return self.answer_many([example])[0]

    def answer_many(self, examples: Sequence[dict[str, Any]]) -> list[Answer]:
        traces = [Trace(self.name) for _ in examples]
        if not traces:
            return []
        return self._answer_batch([str(ex["question"]) for ex in examples], traces)

    @abstractmethod
    def _answer_batch(self, questions: list[str], traces: list[Trace]) -> list[Answer]:
        """One answer per question, filling its trace."""

    def _generate(self, questions: list[str], contexts: Sequence[str | None], traces: list[Trace]) -> list[Any]:
        """One batched generate call over the questions (each with its context, or None: closed-book), recorded as
        the shared ``generate`` step with each question's prompt tokens."""
        with shared_step(traces, "generate", self.tools.counter) as details:
            outputs = generate_answers(self.tools, questions, contexts)
            for out, detail in zip(outputs, details, strict=True):
                detail["prompt_tokens"] = out.built.n_tokens
        return outputs


class NoRAG(_BatchedBaseline):
    """Answer closed-book with one greedy generation; several questions share one batched generate call."""

    name = "no_rag"
    requires_gold = False

    def _answer_batch(self, questions: list[str], traces: list[Trace]) -> list[Answer]:
        outputs = self._generate(questions, [None] * len(questions), traces)
        return [Answer(out.text.strip(), trace) for out, trace in zip(outputs, traces, strict=True)]


class StandardRAG(_BatchedBaseline):
    """Always retrieve the top ``k`` passages for the question and answer with them in the prompt; several questions
    share one search call and one batched generate call."""

    name = "standard_rag"
    requires_gold = False

    def __init__(self, tools: Tools, k: int = 5) -> None:
        super().__init__(tools)
        self.k = k

    def _answer_batch(self, questions: list[str], traces: list[Trace]) -> list[Answer]:
        with shared_step(traces, "retrieve", self.tools.counter) as details:
            found = self.tools.search(questions, self.k)
            for passages, detail in zip(found, details, strict=True):
                detail["ids"] = [p.chunk_id for p in passages]
                detail["scores"] = [p.score for p in passages]
        for passages, trace in zip(found, traces, strict=True):
            if not passages:
                trace.fallback("retrieval returned nothing: answered closed-book")
        outputs = self._generate(
            questions, [context_block(passages, self.tools.passage_chars) for passages in found], traces
        )
        answers = []
        for out, passages, trace in zip(outputs, found, traces, strict=True):
            _note_truncation(trace, out)
            trace.retrieved = bool(passages)
            trace.passages = [p.chunk_id for p in passages]
            answers.append(Answer(out.text.strip(), trace))
        return answers


class OracleRouting(Method):
    """Closed-book first; retrieve (Standard RAG) only when the closed-book answer misses every gold alias."""

    name = "oracle"
    requires_gold = True

    def __init__(self, tools: Tools, k: int = 5) -> None:
        super().__init__(tools)
        self.closed, self.rag = NoRAG(tools), StandardRAG(tools, k)

    def answer(self, example: dict[str, Any]) -> Answer:
        first = self.closed.answer(example)
        trace = Trace(self.name, steps=list(first.trace.steps))
        scores = score_answer(first.text, list(example["answers"]), list(example.get("options") or []))
        correct = scores["contains"] > 0.5
        trace.steps[-1].detail["closed_book_correct"] = correct
        if correct:
            return Answer(first.text, trace)
        second = self.rag.answer(example)
        trace.steps += second.trace.steps
        trace.retrieved, trace.passages = second.trace.retrieved, second.trace.passages
        trace.fallbacks, trace.notes = second.trace.fallbacks, second.trace.notes
        return Answer(second.text, trace)
