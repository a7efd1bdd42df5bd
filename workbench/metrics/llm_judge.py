"""An LLM-as-judge correctness label: does a candidate answer mean the same as one of the gold answers?

**requires_gold**: the judge reads the reference answers, so its output is a *label* (for calibration, classifier
training and evaluation), never a runtime feature. It is an option next to the rule-based labels of
:mod:`workbench.metrics.qa` (normalised exact match, containment, token F1): slower, but it accepts paraphrases
("JFK" for "John F. Kennedy") that string rules miss, and it rejects containment hits that say something else.

P(correct) comes from one next-token read per batch: the judge model is asked for a one-word verdict, and
P(correct) = P(yes) / (P(yes) + P(no)), with the case variants of each word pooled (log-sum-exp of their first-token
log-probs). All questions go into ONE ``generator.next_token_logprobs`` call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from workbench.core.errors import ConfigError, DataError

JUDGE_SYSTEM = "You grade answers to quiz questions strictly and fairly."
JUDGE_PROMPT = (
    "Question: {question}\n"
    "Reference answers (any one of them is correct):\n{references}\n"
    "Candidate answer: {answer}\n"
    "Does the candidate answer mean the same thing as one of the reference answers? "
    "Ignore wording, spelling and extra detail that does not change the meaning. Reply with one word: yes or no."
)
YES_OPTIONS: tuple[str, ...] = ("yes", "Yes")
NO_OPTIONS: tuple[str, ...] = ("no", "No")


class LLMCorrectnessJudge:
    """Correctness of short answers judged by a causal LM (a :class:`~workbench.backends.generator.Generator`).

    ``generator`` needs ``render_chat(message, system=...)`` and ``next_token_logprobs(prompts, options)``;
    ``prompt`` is a template with ``{question}``, ``{references}`` (one ``- alias`` line per gold answer) and
    ``{answer}``; ``yes`` / ``no`` are the verdict words whose first-token probabilities are pooled; ``threshold``
    turns P(correct) into a 0/1 label.
    """

    requires_gold: ClassVar[bool] = True

    def __init__(
        self,
        generator: Any,
        *,
        prompt: str = JUDGE_PROMPT,
        system: str | None = JUDGE_SYSTEM,
        yes: Sequence[str] = YES_OPTIONS,
        no: Sequence[str] = NO_OPTIONS,
        threshold: float = 0.5,
    ) -> None:
        missing = [key for key in ("{question}", "{references}", "{answer}") if key not in prompt]
        if missing:
            raise ConfigError(f"judge prompt lacks the placeholder(s) {missing}", "LLMCorrectnessJudge")
        if not yes or not no:
            raise ConfigError("need at least one 'yes' and one 'no' option", "LLMCorrectnessJudge")
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(f"threshold must be in [0, 1], got {threshold}", "LLMCorrectnessJudge")
        self.generator = generator
        self.prompt = prompt
        self.system = system
        self.yes, self.no = tuple(yes), tuple(no)
        self.threshold = threshold

    def chats(self, questions: Sequence[str], answers: Sequence[str], gold_lists: Sequence[Sequence[str]]) -> list[str]:
        """The rendered judge prompts (one per question), as :meth:`judge` sends them."""
        questions, answers, gold_lists = list(questions), list(answers), list(gold_lists)
        if not len(questions) == len(answers) == len(gold_lists):
            raise DataError(
                f"{len(questions)} questions, {len(answers)} answers and {len(gold_lists)} gold lists",
                "LLMCorrectnessJudge",
            )
        out = []
        for q, a, golds in zip(questions, answers, gold_lists, strict=True):
            refs = [str(g).strip() for g in golds if str(g).strip()]
            if not refs:
                raise DataError(f"no gold answer for question {q!r} (the judge requires gold)", "LLMCorrectnessJudge")
            message = self.prompt.format(
                question=str(q).strip(),
                references="\n".join(f"- {r}" for r in refs),
                answer=str(a).strip() or "(no answer)",
            )
            out.append(self.generator.render_chat(message, system=self.system))
        return out

    def judge(
        self, questions: Sequence[str], answers: Sequence[str], gold_lists: Sequence[Sequence[str]]
    ) -> np.ndarray:
        """P(correct) per answer, a float array in [0, 1]: P(yes) / (P(yes) + P(no)), from one batched call."""
        chats = self.chats(questions, answers, gold_lists)
        if not chats:
            return np.zeros(0)
        lp = np.asarray(self.generator.next_token_logprobs(chats, [*self.yes, *self.no]), dtype=np.float64)
        k = len(self.yes)
        yes = np.logaddexp.reduce(lp[:, :k], axis=1)
        no = np.logaddexp.reduce(lp[:, k:], axis=1)
        return 1.0 / (1.0 + np.exp(no - yes))

    def labels(
        self, questions: Sequence[str], answers: Sequence[str], gold_lists: Sequence[Sequence[str]]
    ) -> np.ndarray:
        """0/1 correctness labels (floats, like the rule-based scores): 1.0 where P(correct) >= ``threshold``."""
        return (self.judge(questions, answers, gold_lists) >= self.threshold).astype(np.float64)
