"""The baselines: No-RAG (closed-book), Standard RAG (always retrieve the top k) and oracle routing (retrieve only
when the closed-book answer is wrong; reads the gold answer, evaluation only). The implementations are in
:mod:`~workbench.methods.baselines.method`, imported when a baseline is built."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workbench.core.bounds import PASSAGES, check_int
from workbench.core.config import doc
from workbench.methods.spec import BuildRequest, MethodSpec, lazy_exports

__all__ = ["METHODS", "RetrievalOptions"]

__getattr__ = lazy_exports(__name__, "method")


@dataclass(frozen=True)
class RetrievalOptions:
    """The option of the baselines that retrieve (Standard RAG, oracle routing)."""

    k: int = doc("passages retrieved and placed in the prompt", 5)

    def validate(self, given: Mapping[str, Any]) -> RetrievalOptions:
        """Raise a :class:`ConfigError` naming the bad key; return ``self``."""
        check_int(self.k, "k", "k", PASSAGES)
        return self


def _build_no_rag(req: BuildRequest) -> Any:
    from workbench.methods.baselines.method import NoRAG

    return NoRAG(req.tools)


def _build_standard_rag(req: BuildRequest) -> Any:
    from workbench.methods.baselines.method import StandardRAG

    return StandardRAG(req.tools, k=req.options.k)


def _build_oracle(req: BuildRequest) -> Any:
    from workbench.methods.baselines.method import OracleRouting

    return OracleRouting(req.tools, k=req.options.k)


METHODS = (
    MethodSpec("no_rag", "answer closed-book", _build_no_rag, family="no_rag", fixed_retrieve=False),
    MethodSpec(
        "standard_rag",
        "always retrieve the top k",
        _build_standard_rag,
        options=RetrievalOptions,
        family="standard_rag",
        fixed_retrieve=True,
    ),
    MethodSpec(
        "oracle",
        "retrieve only when the closed-book answer is wrong (reads the gold answer)",
        _build_oracle,
        options=RetrievalOptions,
        gold=True,
        family="oracle",
    ),
)
"""The three baselines' specs."""
