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

Every public name (each module's ``__all__``) is importable from here, as it was from the former single module.
"""

from __future__ import annotations

# the facade: the star imports bring each module's __all__, and this package's __all__ is their union
from workbench.methods.dense_rag import decisions, method, settings
from workbench.methods.dense_rag.decisions import *  # noqa: F403
from workbench.methods.dense_rag.method import *  # noqa: F403
from workbench.methods.dense_rag.settings import *  # noqa: F403

__all__ = [*settings.__all__, *decisions.__all__, *method.__all__]
