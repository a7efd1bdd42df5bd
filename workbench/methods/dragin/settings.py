"""DRAGIN's settings: every knob, its bounds and checks, and the paper's defaults where ours depart (the docstring of
:class:`DraginSettings`). Light to import: the registry and the recipe loader read it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from workbench.core.bounds import NEW_TOKENS, PASSAGES, POOL, ROUNDS, check_counts, check_int, check_number
from workbench.core.config import doc

__all__ = ["COUNT_BOUNDS", "THRESHOLD_BOUND", "DraginSettings"]

THRESHOLD_BOUND = 1000.0
"""The largest RIND threshold (RIND is entropy in nats times a mean-one attention share: a few units at most on
real answers; a larger threshold is a typo, not a setting)."""

COUNT_BOUNDS = {"query_words": POOL, "k": PASSAGES, "max_retrievals": ROUNDS}
"""The largest value of each integer setting (all from 1)."""


@dataclass(frozen=True)
class DraginSettings:
    """Every knob of DRAGIN (Su et al., 2024), with the released code's defaults (its ``config/*/DRAGIN.json``).

    * ``threshold`` = 1.2 — retrieve at the first word whose RIND exceeds it (``hallucination_threshold``: 1.2 for
      Llama2-7b on 2WikiMultihopQA; the released configs use 1.2–1.4 by model and dataset).
    * ``query_words`` = 35 — QFS keeps the top-n words the triggering token attends to (``retrieve_keep_top_k``:
      35 or 40 in the released configs; the paper leaves n as a hyper-parameter).
    * ``k`` = 3 — passages retrieved per retrieval (``retrieve_topk``, BM25 in the paper: here the run's retriever).
    * ``max_retrievals`` = 3 — retrievals per question at most. Ours: the paper loops until the answer is complete
      (bounded by ``generate_max_length``); our short answers rarely need more than one, and a cap bounds the cost.
    * ``answer_max_tokens`` = None — token budget of each generation (None: the tools' ``max_new_tokens``; the
      code's ``generate_max_length`` is 64–128 for its multi-sentence chain-of-thought answers).
    """

    threshold: float = doc(
        "RIND threshold: retrieve at the first word whose entropy x attention influence x significance exceeds it",
        1.2,
    )
    query_words: int = doc("QFS: words of the query, those the triggering token attends to most", 35)
    k: int = doc("passages retrieved at each retrieval", 3)
    max_retrievals: int = doc("retrievals per question at most (the paper: until the answer ends)", 3)
    answer_max_tokens: int | None = doc("token budget of each generation (null: evaluate.max_new_tokens)", None)

    def validate(self) -> DraginSettings:
        """Raise :class:`~workbench.core.errors.ConfigError` on a bad value; return ``self`` for chaining."""
        check_number(self.threshold, "threshold", "dragin.threshold", 0.0, THRESHOLD_BOUND)
        check_counts(self, COUNT_BOUNDS, "dragin")
        check_int(self.answer_max_tokens, "answer_max_tokens", "dragin.answer_max_tokens", NEW_TOKENS, optional=True)
        return self

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict."""
        return asdict(self)
