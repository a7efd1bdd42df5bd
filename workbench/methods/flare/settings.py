"""FLARE's settings: every knob, its bounds and checks, and the paper's defaults where ours depart (the docstring of
:class:`FLARESettings`). Light to import: the registry and the recipe loader read it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from workbench.core.bounds import NEW_TOKENS, PASSAGES, ROUNDS, check_counts, check_int, check_number, shown
from workbench.core.config import doc
from workbench.core.errors import ConfigError

__all__ = ["COUNT_BOUNDS", "FLARESettings"]

COUNT_BOUNDS = {"k": PASSAGES, "max_sentences": ROUNDS}
"""The largest value of each integer setting (all from 1)."""


@dataclass(frozen=True)
class FLARESettings:
    """Every knob of FLARE (Jiang et al., 2023, "Active Retrieval Augmented Generation", FLARE-direct); docs/methods/
    flare.md lists the paper's values beside ours.

    * ``theta`` = 0.8 — θ: retrieve for a look-ahead sentence iff one of its tokens has probability below θ (§3.2.1).
      The authors' released 2WikiMultihopQA configuration (``look_ahead_filter_prob`` 0.8); docs/methods/flare.md
      says what the other datasets use. The study tunes it.
    * ``beta`` = 0.4 — β: tokens of probability below β are left out of the query (§3.2.2, masked implicit
      queries); ``look_ahead_mask_prob`` 0.4 in both released configurations. 0 keeps every token (the unmasked
      sentence as the query).
    * ``look_ahead_tokens`` = None — token budget of each look-ahead sentence (None: what is left of the answer's
      budget, ``answer_max_tokens``). The paper looks one sentence ahead (its code: a window of tokens cut at the
      first sentence end); our answers are short (16 tokens, stopping at a newline), so one look-ahead usually
      covers the whole answer.
    * ``max_sentences`` = 8 — rounds of look-ahead (one sentence each) at most. The paper loops until the answer
      is complete; the answer's token budget ends the loop first on our short answers.
    * ``max_retrievals`` = None — retrievals per question at most (None: any sentence may retrieve, as the paper).
    * ``k`` = 3 — passages retrieved per query (the run's retriever); the regenerated sentence sees only the last
      retrieval's passages, as in the paper (each retrieval replaces the previous documents).
    * ``prepend_question`` = False — the query is the masked sentence alone (the paper's implicit query); True
      puts the question in front of it (helps a short answer whose masked sentence is a word or two).
    * ``answer_max_tokens`` = None — token budget of the whole answer (None: the tools' ``max_new_tokens``).
    """

    theta: float = doc(
        "theta: retrieve for a look-ahead sentence iff one of its tokens has probability < theta (0: never)", 0.8
    )
    beta: float = doc("beta: tokens of probability < beta are masked out of the query (0: keep every token)", 0.4)
    look_ahead_tokens: int | None = doc(
        "token budget of each look-ahead sentence (null: what is left of the answer's budget)", None
    )
    max_sentences: int = doc("sentences (look-ahead rounds) per answer at most", 8)
    max_retrievals: int | None = doc("retrievals per question at most (null: any sentence may retrieve)", None)
    k: int = doc("passages retrieved per query", 3)
    prepend_question: bool = doc("put the question in front of the masked sentence in the query", False)
    answer_max_tokens: int | None = doc("token budget of the whole answer (null: evaluate.max_new_tokens)", None)

    def validate(self) -> FLARESettings:
        """Raise :class:`ConfigError` on a bad value; return ``self`` for chaining."""
        check_number(self.theta, "theta", "flare.theta", 0.0, 1.0)
        check_number(self.beta, "beta", "flare.beta", 0.0, 1.0)
        check_counts(self, COUNT_BOUNDS, "flare")
        check_int(self.look_ahead_tokens, "look_ahead_tokens", "flare.look_ahead_tokens", NEW_TOKENS, optional=True)
        check_int(self.max_retrievals, "max_retrievals", "flare.max_retrievals", ROUNDS, optional=True)
        check_int(self.answer_max_tokens, "answer_max_tokens", "flare.answer_max_tokens", NEW_TOKENS, optional=True)
        if not isinstance(self.prepend_question, bool):
            raise ConfigError(
                f"prepend_question must be true or false, got {shown(self.prepend_question)}", "flare.prepend_question"
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict."""
        return asdict(self)
