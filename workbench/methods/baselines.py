"""Baselines in the same engine: No-RAG, Standard RAG (always retrieve top-k), and oracle routing.

:class:`OracleRouting` reads the gold answers (``requires_gold = True``): it answers closed-book and retrieves only
when that answer is wrong — an upper bound for any retrieval decision, for evaluation only, never in a bundle.
"""

from __future__ import annotations

from typing import Any

from workbench.methods.base import Answer, Method, Tools, Trace
from workbench.methods.common import context_block, generate_answers


def _note_truncation(trace: Trace, output: Any) -> None:
    if getattr(output, "built", None) is not None and output.built.truncated:
        trace.fallback("context cut to fit the model window")


class NoRAG(Method):
    """Answer closed-book with one greedy generation."""

    name = "no_rag"
    requires_gold = False

    def answer(self, example: dict[str, Any]) -> Answer:
        trace = Trace(self.name)
        with trace.step("generate", self.tools.counter) as step:
            out = generate_answers(self.tools, [example["question"]], [None])[0]
            step["prompt_tokens"] = out.built.n_tokens
        return Answer(out.text.strip(), trace)


class StandardRAG(Method):
    """Always retrieve the top ``k`` passages for the question and answer with them in the prompt."""

    name = "standard_rag"
    requires_gold = False

    def __init__(self, tools: Tools, k: int = 5) -> None:
        super().__init__(tools)
        self.k = k

    def answer(self, example: dict[str, Any]) -> Answer:
        trace = Trace(self.name)
        with trace.step("retrieve", self.tools.counter) as step:
            passages = self.tools.search([example["question"]], self.k)[0]
            step["ids"] = [p.chunk_id for p in passages]
            step["scores"] = [p.score for p in passages]
        if not passages:
            trace.fallback("retrieval returned nothing: answered closed-book")
        with trace.step("generate", self.tools.counter) as step:
            out = generate_answers(
                self.tools, [example["question"]], [context_block(passages, self.tools.passage_chars)]
            )[0]
            step["prompt_tokens"] = out.built.n_tokens
            _note_truncation(trace, out)
        trace.retrieved = bool(passages)
        trace.passages = [p.chunk_id for p in passages]
        return Answer(out.text.strip(), trace)


class OracleRouting(Method):
    """Closed-book first; retrieve (Standard RAG) only when the closed-book answer misses every gold alias."""

    name = "oracle"
    requires_gold = True

    def __init__(self, tools: Tools, k: int = 5) -> None:
        super().__init__(tools)
        self.closed, self.rag = NoRAG(tools), StandardRAG(tools, k)

    def answer(self, example: dict[str, Any]) -> Answer:
        from workbench.metrics.qa import score_answer

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
