"""LLM-as-judge NLI (the way DENSE-RAG judges entailment): the generator is asked for a one-word verdict.

The prompt shows the (optional) question, a premise and a hypothesis, and asks whether the premise implies the
hypothesis, answering ``yes``, ``no`` or ``maybe``. One forward pass per pair reads the next-token log-probabilities
of those three words; a softmax over them gives (contradiction ← no, neutral ← maybe, entailment ← yes).

Measured on these machines, small instruct models (SmolLM2-135M, Gemma-270M) judge near chance, so this backend is
for users with a capable generator; the workbench's offline default judge is chosen from the table written by the
``train-nli`` recipe.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.backends.cost import CostCounter
from workbench.backends.nli import NLIJudge, register_nli_judge
from workbench.core.hashing import stable_hash

JUDGE_SYSTEM = "You check whether one statement follows from another. Reply with a single word: yes, no or maybe."
JUDGE_TEMPLATE = (
    "{question}Statement A: {premise}\nStatement B: {hypothesis}\n"
    "If statement A is true, must statement B be true as well? Reply yes, no or maybe."
)
# verdict words in NLI_LABELS order: contradiction, neutral, entailment
VERDICTS = ("no", "maybe", "yes")


@register_nli_judge("llm")
class LLMJudgeNLI(NLIJudge):
    """NLI by prompting a :class:`~workbench.backends.generator.Generator` (any causal LM with a chat template)."""

    kind = "llm"

    def __init__(self, generator: Any, *, counter: CostCounter | None = None) -> None:
        super().__init__(counter=counter if counter is not None else generator.counter)
        self.generator = generator

    @property
    def fingerprint(self) -> str:
        """Depends on the generator's weights and on the prompt wording."""
        return stable_hash([self.kind, self.generator.fingerprint, JUDGE_SYSTEM, JUDGE_TEMPLATE, VERDICTS])

    def prompt(self, premise: str, hypothesis: str, question: str = "") -> str:
        """The rendered judge prompt for one pair."""
        lead = f"Question: {question}\n" if question else ""
        text = JUDGE_TEMPLATE.format(question=lead, premise=premise, hypothesis=hypothesis)
        return self.generator.render_chat(text, system=JUDGE_SYSTEM)

    def _predict(self, premises: list[str], hypotheses: list[str], questions: list[str]) -> np.ndarray:
        prompts = [self.prompt(p, h, q) for p, h, q in zip(premises, hypotheses, questions, strict=True)]
        logprobs = self.generator.next_token_logprobs(prompts, VERDICTS)
        logprobs = logprobs - logprobs.max(axis=1, keepdims=True)
        probs = np.exp(logprobs)
        return (probs / probs.sum(axis=1, keepdims=True)).astype(np.float32)
