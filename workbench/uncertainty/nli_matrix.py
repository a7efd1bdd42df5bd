"""Square NLI matrices for many answer sets from ONE ``judge.entail`` call, judging each needed pair once.

:class:`NLIMatrices` collects answer sets (one question each), decides which ordered pairs need the judge, calls it
once and rebuilds every ``(n, n, 3)`` matrix (rows in :data:`~workbench.data.nli_labels.NLI_LABELS` order,
premise i → hypothesis j). Pairs that need no call:

* **identical strings** (exact equality, the diagonal included): (contradiction 0, neutral 0, entailment 1) — a text
  entails itself;
* **the mirror of a pair already asked**, for a symmetric judge (:func:`judge_is_symmetric`): P(a → b) = P(b → a),
  so each unordered pair is judged once;
* **a repeat** of a (question, premise, hypothesis) triple asked for another set.

:attr:`NLIMatrices.saved` counts the ordered off-diagonal pairs answered without the judge, by reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.backends.nli import AnswerEquivalenceJudge
from workbench.data.nli_labels import CONTRADICTION, ENTAILMENT, NEUTRAL

SELF_PAIR = np.zeros(3, dtype=np.float64)
SELF_PAIR[[CONTRADICTION, NEUTRAL, ENTAILMENT]] = (0.0, 0.0, 1.0)
"""The row of a text judged against an identical text: (contradiction 0, neutral 0, entailment 1)."""


def judge_is_symmetric(judge: Any) -> bool:
    """True when ``judge.entail(a, b) == judge.entail(b, a)`` for every pair.

    A judge may say so with a boolean ``symmetric`` attribute; otherwise only the rule-based
    :class:`~workbench.backends.nli.AnswerEquivalenceJudge` counts as symmetric (its rules — normalised exact match,
    containment either way, token F1, embedding cosine, the empty-answer check — all ignore the order). NLI models
    and LLM judges are directional.
    """
    flag = getattr(judge, "symmetric", None)
    if isinstance(flag, bool):
        return flag

    return isinstance(judge, AnswerEquivalenceJudge)


class NLIMatrices:
    """Plan, judge and rebuild the NLI matrices of many answer sets (see the module docstring).

    ``add(question, texts)`` registers a set and returns its handle; ``run(judge)`` makes the one call;
    ``matrix(handle)`` returns that set's ``(n, n, 3)`` float64 matrix.
    """

    def __init__(self, symmetric: bool) -> None:
        self.symmetric = symmetric
        self._sets: list[tuple[str, list[str]]] = []
        self._asked: dict[tuple[str, str, str], int] = {}  # (question, premise, hypothesis) → row of the call
        self._seen: set[tuple[str, str, str]] = set()  # every ordered triple registered so far
        self._probs = np.zeros((0, 3))
        self.saved = {"identical": 0, "symmetric": 0, "repeated": 0}

    def add(self, question: str, texts: Sequence[str]) -> int:
        """Register one answer set (judged with ``question`` prefixed by the judge); returns its handle."""
        texts = [str(t) for t in texts]
        self._sets.append((question, texts))
        for x, a in enumerate(texts):
            for y, b in enumerate(texts):
                if x == y:
                    continue
                if a == b:
                    self.saved["identical"] += 1
                    continue
                ordered, key = (question, a, b), self._key(question, a, b)
                if ordered in self._seen:
                    self.saved["repeated"] += 1
                elif key in self._asked:
                    self.saved["symmetric"] += 1
                else:
                    self._asked[key] = len(self._asked)
                self._seen.add(ordered)
        return len(self._sets) - 1

    def _key(self, question: str, a: str, b: str) -> tuple[str, str, str]:
        """The triple sent to the judge for a → b: for a symmetric judge the pair in sorted order."""
        if self.symmetric and b < a:
            return (question, b, a)
        return (question, a, b)

    @property
    def pairs(self) -> int:
        """Ordered pairs the judge is asked for."""
        return len(self._asked)

    def run(self, judge: Any) -> None:
        """Judge every planned pair in ONE ``judge.entail`` call (none when no pair is needed)."""
        if not self._asked:
            return
        keys = list(self._asked)
        questions, premises, hypotheses = ([k[i] for k in keys] for i in range(3))
        self._probs = np.asarray(judge.entail(premises, hypotheses, questions), dtype=np.float64)

    def matrix(self, handle: int) -> np.ndarray:
        """The ``(n, n, 3)`` matrix of set ``handle``: identical texts (the diagonal included) get
        :data:`SELF_PAIR`, every other entry the judge's row for its (possibly mirrored) pair."""
        question, texts = self._sets[handle]
        out = np.zeros((len(texts), len(texts), 3), dtype=np.float64)
        for x, a in enumerate(texts):
            for y, b in enumerate(texts):
                out[x, y] = SELF_PAIR if a == b else self._probs[self._asked[self._key(question, a, b)]]
        return out
