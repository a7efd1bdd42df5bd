"""DENSE-RAG (spec ``specs/seed-000-dense.md``): DENSE triage of the retrieved context, then adaptive semantic chunking
and iterative context refinement for the uncertain questions. One job per module:

* :mod:`~workbench.methods.dense_rag.method` — :class:`DenseRAG`, the per-question flow (retrieve → DENSE →
  semantic chunking → refine → select answer; its docstring walks through the steps);
* :mod:`~workbench.methods.dense_rag.settings` — :class:`DenseRAGSettings`, every knob and its checks;
* :mod:`~workbench.methods.dense_rag.chunking` — C₀'s fixed-size chunks and the semantic-chunk pool of the retrieved
  documents (§6);
* :mod:`~workbench.methods.dense_rag.decisions` — the pure decisions: chunk classes (eqs. 8–10), refill and top-up,
  best context and stop rule (Alg. 3), SELECT_ANSWER (§4.8);
* :mod:`~workbench.methods.dense_rag.memo` — the per-question generation memo (a chunk rephrased once per question).

Every public name is importable from here, as it was from the former single module.
"""

from __future__ import annotations

from workbench.methods.dense_rag.decisions import (
    CERTAIN,
    NECESSARY,
    UNNECESSARY,
    classify_chunks,
    entailment_verdicts,
    is_better,
    is_unchanged,
    parse_self_evaluation,
    refill,
    select_answer,
    should_stop,
    top_up,
    uncertain_positions,
)
from workbench.methods.dense_rag.method import SELF_EVAL_SYSTEM, SELF_EVAL_TEMPLATE, DenseRAG
from workbench.methods.dense_rag.settings import (
    ADJACENCY_RULES,
    CHUNKINGS,
    NECESSITY_RULES,
    REFILL_FROM,
    REPHRASE_CAP_STEP,
    STOP_FLAGS,
    STOP_RULES,
    DenseRAGSettings,
)

__all__ = [
    "ADJACENCY_RULES",
    "CERTAIN",
    "CHUNKINGS",
    "NECESSARY",
    "NECESSITY_RULES",
    "REFILL_FROM",
    "REPHRASE_CAP_STEP",
    "SELF_EVAL_SYSTEM",
    "SELF_EVAL_TEMPLATE",
    "STOP_FLAGS",
    "STOP_RULES",
    "UNNECESSARY",
    "DenseRAG",
    "DenseRAGSettings",
    "classify_chunks",
    "entailment_verdicts",
    "is_better",
    "is_unchanged",
    "parse_self_evaluation",
    "refill",
    "select_answer",
    "should_stop",
    "top_up",
    "uncertain_positions",
]
