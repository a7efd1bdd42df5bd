"""What InSemRAG searches (spec ``seed-004-insemrag.md`` §5, D3, D16): its own token-window view of the corpus, the
hybrid retriever built over it when none is given (dense, sparse and the optional extended channel), and the routing
that hands each channel its own view of a multi-view query (the dense channel the paraphrase q_d, the sparse channel
the keywords q_s) before the weighted fusion of eq. 8."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from workbench.backends.retrievers import HybridRetriever, RetrievalResult, Retriever
from workbench.core.errors import ConfigError
from workbench.data.chunkers import FixedSizeChunker
from workbench.data.corpus import chunked_view
from workbench.methods.base import Tools
from workbench.methods.controller import CHANNELS

__all__ = [
    "ViewChannel",
    "build_hybrid_retriever",
    "encoder_tokenizer",
    "route_views",
    "scores_by_row",
    "token_window_view",
]


class ViewChannel(Retriever):
    """A channel that searches its own view of a multi-view query.

    The query strings a routed :class:`HybridRetriever` receives are JSON objects ``{channel: text}``; this wrapper
    hands the inner retriever the text of ``view`` (so the dense channel searches the paraphrase and the sparse
    channel the keywords) and keeps its last results in ``last`` (query → result) for per-channel score logging.
    """

    def __init__(self, inner: Retriever, view: str) -> None:
        self.inner = inner
        self.view = view
        self.corpus = inner.corpus
        self.counter = inner.counter
        self.last: dict[str, RetrievalResult] = {}

    def _search(self, queries: list[str], k: int) -> list[RetrievalResult]:
        texts = [json.loads(q)[self.view] for q in queries]
        results = self.inner._search(texts, k)
        self.last = dict(zip(queries, results, strict=True))
        return results


def route_views(hybrid: HybridRetriever, candidates_per_channel: int | None = None) -> HybridRetriever:
    """A hybrid retriever like ``hybrid`` (fusion, normalisation, default weights, counter) whose channels are
    :class:`ViewChannel` wrappers of its channels, each reading the view named like the channel."""
    unknown = [name for name in hybrid.names if name not in CHANNELS]
    if unknown:
        raise ConfigError(f"unknown channel(s) {unknown}: InSemRAG channels are {', '.join(CHANNELS)}", "retriever")
    channels = {
        name: ch if isinstance(ch, ViewChannel) else ViewChannel(ch, name) for name, ch in hybrid.channels.items()
    }
    return HybridRetriever(
        channels,
        weights=dict(zip(hybrid.names, (float(w) for w in hybrid.weights), strict=True)),
        fusion=hybrid.fusion,
        normalization=hybrid.normalization,
        rrf_k=hybrid.rrf_k,
        candidate_k=candidates_per_channel or hybrid.candidate_k,
        counter=hybrid.counter,
    )


def build_hybrid_retriever(
    tools: Tools, channels: Sequence[str] = ("dense", "sparse"), *, dense_index: str = "full", dense_pool: int = 50
) -> HybridRetriever:
    """A hybrid retriever over ``tools.corpus``: dense (``tools.embedder``; a full FAISS index, or with
    ``dense_index="pooled"`` the top ``dense_pool`` BM25 passages re-ranked by embedding), sparse (BM25; the tools'
    own BM25 retriever when it searches the same corpus) and, if asked, extended (the dense channel again). Over the
    user's engine the channels are the engine's (:meth:`~workbench.methods.base.Tools.engine_channel`)."""
    if tools.embedder is None and ("dense" in channels or "extended" in channels):
        raise ConfigError("InSemRAG's dense channel needs an embedder (tools.embedder is None)", "insemrag.retriever")
    built: dict[str, Retriever] = {}
    if "dense" in channels or "extended" in channels:
        dense: Retriever = tools.dense_retriever(dense_index, dense_pool)
        built.update({name: dense for name in ("dense", "extended") if name in channels})
    if "sparse" in channels:
        built["sparse"] = tools.bm25_retriever()  # the tools' own BM25 over the same passages, else one shared
    return HybridRetriever({name: built[name] for name in channels}, counter=tools.counter)


def encoder_tokenizer(embedder: Any) -> Any:
    """The dense encoder's fast tokenizer (None when it has none: callers count white-space words instead)."""
    model = getattr(embedder, "_model", None)
    tokenizer = getattr(embedder, "tokenizer", None) or getattr(model, "tokenizer", None)
    return tokenizer if getattr(tokenizer, "is_fast", False) else None


def token_window_view(tools: Tools, tokens: int) -> tuple[Tools, dict[str, Any]]:
    """InSemRAG's own view of ``tools.corpus`` (spec §5, D16): every document rebuilt from its rows and cut into
    consecutive, non-overlapping windows of ``tokens`` tokens of the dense encoder's tokenizer (white-space words
    without one), chunk ids ``<doc_id>#w<index>`` (:func:`~workbench.data.corpus.chunked_view`). Returns the Tools
    over the view (built once per Tools and window length, shared by every InSemRAG on them) and a description of it
    for the trace."""

    def build() -> tuple[Tools, dict[str, Any]]:
        tokenizer = encoder_tokenizer(tools.embedder)
        chunker = FixedSizeChunker(size=tokens, overlap=0, unit="tokens", tokenizer=tokenizer)
        columns = chunked_view(tools.corpus, chunker, "w")
        info = {
            "chunking": "fixed",
            "chunk_tokens": tokens,
            "unit": "encoder tokens" if tokenizer is not None else "words",
            "chunks": len(columns["chunk_id"]),
            "documents": len(dict.fromkeys(columns["doc_id"])),
        }
        return tools.with_corpus(columns), info

    return tools.shared(f"insemrag:view:{tokens}", build)


def scores_by_row(result: RetrievalResult) -> dict[int, float]:
    """Corpus row → score of one result, best first."""
    return {int(i): float(v) for i, v in zip(result.indices, result.scores, strict=True)}
