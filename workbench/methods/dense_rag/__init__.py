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

This ``__init__`` holds the spec only; every public name of ``settings``, ``decisions`` and
``method`` (each module's ``__all__``) is importable from here on first use, as it was from the former single module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.methods.dense_rag.breakpoints import dense_breakpoints
from workbench.methods.spec import BuildRequest, MethodSpec, Tunable, lazy_exports

__all__ = ["METHOD"]

__getattr__ = lazy_exports(__name__, "settings", "decisions", "method")


def _settings_class() -> type:
    # the settings hold the DENSE stats settings, whose package imports numpy and the features: loaded when needed
    from workbench.methods.dense_rag.settings import DenseRAGSettings

    return DenseRAGSettings


def _build(req: BuildRequest) -> Any:
    from workbench.methods.dense_rag.method import DenseRAG

    return DenseRAG(req.tools, settings=req.settings())


def _breakpoints(records: Any) -> list[float]:
    return dense_breakpoints(records)


def _record_decision(method: Any, question: str, contexts: Sequence[str] | None) -> dict[str, Any]:
    """DENSE's triage of a logged context (the chunk texts DENSE judged, the ``dense`` step's ``contexts``): DENSE-RAG
    always retrieves; ``refine`` says whether semantic chunking and refinement run (DSE₀ > θ). An empty context
    (retrieval found nothing: DENSE-RAG answers closed-book) has no triage: null with that reason."""
    if not contexts:
        return {"retrieve": None, "reason": "the record's 'contexts' is empty: there is no context to triage"}
    return {"retrieve": True, **method.triage(question, list(contexts))}


METHOD = MethodSpec(
    "dense_rag",
    "DENSE-RAG: semantic chunking and context refinement driven by degree-based semantic entropy",
    _build,
    settings=_settings_class,
    family="dense_rag",
    # θ: the DENSE threshold on DSE₀; τ: the semantic-chunking threshold
    tunable={"theta": Tunable("float", 0.0, None, breakpoints=True), "tau": Tunable("float", 0.0, 1.0)},
    space={"theta": {"breakpoints": True}},  # θ over the DSE₀ breakpoints
    breakpoints=_breakpoints,
    record_decision=_record_decision,
    record_needs=("contexts",),
)
"""DENSE-RAG's spec."""
