"""DRAGIN — Dynamic Retrieval Augmented Generation based on the Information Needs of LLMs (Su et al., 2024): retrieve
where a word's real-time information need (RIND: entropy × attention influence × semantic significance) exceeds a
threshold, with the query formed from the words the triggering token attends to most (QFS), and regenerate from
there. One job per module:

* :mod:`~workbench.methods.dragin.settings` — :class:`DraginSettings`, every knob and its checks;
* :mod:`~workbench.methods.dragin.rule` — :func:`decide`, the one retrieval rule;
* :mod:`~workbench.methods.dragin.rind` — RIND and QFS on plain arrays (imported when built);
* :mod:`~workbench.methods.dragin.reading` — the model's attention over prompt + answer (imported when built);
* :mod:`~workbench.methods.dragin.method` — :class:`DRAGIN`, the rounds (imported when built).

This ``__init__`` holds the settings and the spec only (docs/methods/dragin.md).
"""

from __future__ import annotations

from typing import Any

from workbench.core.bounds import PASSAGES, POOL, ROUNDS
from workbench.methods.dragin.rule import decide
from workbench.methods.dragin.settings import THRESHOLD_BOUND, DraginSettings
from workbench.methods.spec import BuildRequest, MethodSpec, Tunable, lazy_exports

__all__ = ["METHOD", "DraginSettings", "decide"]

__getattr__ = lazy_exports(__name__, "method", "rind", "settings")


def _build(req: BuildRequest) -> Any:
    from workbench.methods.dragin.method import DRAGIN

    return DRAGIN(req.tools, settings=req.settings())


def _record_decision(method: Any, question: str, contexts: Any) -> dict[str, Any]:
    """DRAGIN's first decision on a logged question: its closed-book answer's RIND (round 0 of its answers)."""
    return method.question_decision(question)


METHOD = MethodSpec(
    "dragin",
    "DRAGIN: retrieve where a word's entropy x attention influence x significance exceeds threshold; query from "
    "the words the trigger attends to most",
    _build,
    settings=DraginSettings,
    family="dragin",
    tunable={
        "threshold": Tunable("float", 0.0, THRESHOLD_BOUND),
        "query_words": Tunable("int", 1, POOL),
        "k": Tunable("int", 1, PASSAGES),
        "max_retrievals": Tunable("int", 1, ROUNDS),
    },
    # the cut moves with the threshold, so no replay: every trial runs the method. Log scale from below the code's
    # 1.2 to above what a small model's answers reach (SmolLM2-135M's largest word RIND: median 5, up to 11)
    space={"threshold": {"low": 0.1, "high": 20.0, "log": True}},
    decide=decide,
    record_decision=_record_decision,
    # RIND reads each token's entropy (its full next-token distribution) and the model's attention
    needs=frozenset({"logprobs", "top_logprobs", "attentions"}),
)
"""DRAGIN's spec."""
