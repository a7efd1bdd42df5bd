"""DENSE-RAG's chunks of a question's retrieved documents 𝒟 (spec §3 steps 1 and 3, §6): C₀'s fixed-size chunks
(LangChain-style recursive or plain character windows, §6.1, A8) ranked by cosine to the question (the paper's
per-question dense index, §6.2), and the refinement pool — 𝒟 re-split by semantic chunking (Alg. 2: consecutive
sentences merged while cos > τ and the summed length ≤ T_max) and ranked the same way. Each document is rebuilt from
its corpus chunks first (:func:`~workbench.data.corpus.document_text`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.data.chunkers import (
    LANGCHAIN_SEPARATORS,
    FixedSizeChunker,
    RecursiveChunker,
    SemanticChunker,
    chunk_documents,
)
from workbench.data.corpus import document_text
from workbench.methods.base import Passage, Tools
from workbench.methods.dense_rag.settings import DenseRAGSettings

__all__ = ["ContextChunker", "PoolChunk", "unit_rows"]


def unit_rows(vectors: Any) -> np.ndarray:
    """``vectors`` as float rows scaled to unit length (zero rows stay zero)."""
    rows = np.asarray(vectors, dtype=float)
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


def _cosine_to_question(embedder: Any, question: str, texts: list[str]) -> np.ndarray:
    """Cosine similarity of each text's embedding to the question's (the per-question dense ranking, §6.2)."""
    return unit_rows(embedder.encode(texts)) @ unit_rows(embedder.encode([question]))[0]


@dataclass
class PoolChunk:
    """A semantic chunk of the refinement pool: its id (``<doc_id>#s<index>``) and its prompt text."""

    chunk_id: str
    text: str


class ContextChunker:
    """The chunking steps of one :class:`~workbench.methods.dense_rag.method.DenseRAG`: ``tools`` give the corpus,
    the embedder and the passage length; ``settings`` the chunk sizes, τ, T_max and the pool size. The document index
    (doc id → corpus rows) is built on first use and kept."""

    def __init__(self, tools: Tools, settings: DenseRAGSettings) -> None:
        self.tools = tools
        self.settings = settings
        self._docs: dict[str, list[int]] | None = None
        self._docs_rows = 0

    def fixed_chunks(self, question: str, hits: list[Passage], step: dict[str, Any]) -> list[Passage]:
        """C₀ from DENSE-RAG's own fixed-size chunks of 𝒟 (spec §3 steps 1–3, §6.1–6.2): the documents of ``hits``
        rebuilt from the corpus, split by ``chunking`` (``chunk_size`` / ``chunk_overlap`` characters), embedded and
        ranked by cosine to the question; the top ``k``, best first. Chunk ids are ``<doc_id>#f<index>``."""
        s, tools = self.settings, self.tools
        doc_ids = list(dict.fromkeys(p.doc_id for p in hits))
        titles = {p.doc_id: p.title for p in hits}
        documents = [(d, text) for d in doc_ids if (text := self.document(d)).strip()]
        if s.chunking == "fixed":
            chunker: Any = FixedSizeChunker(size=s.chunk_size, overlap=s.chunk_overlap, unit="chars")
        else:
            chunker = RecursiveChunker(max_chars=s.chunk_size, separators=LANGCHAIN_SEPARATORS, overlap=s.chunk_overlap)
        chunks = chunk_documents(chunker, documents)
        step.update(chunk_size=s.chunk_size, chunk_overlap=s.chunk_overlap, chunks=len(chunks))
        if not chunks:
            return []
        scores = _cosine_to_question(tools.embedder, question, [c.text for c in chunks])
        order = np.argsort(-scores, kind="stable")[: s.k]
        return [
            Passage(
                -1,
                f"{chunks[i].doc_id}#f{chunks[i].index}",
                chunks[i].doc_id,
                titles[chunks[i].doc_id],
                chunks[i].text,
                float(scores[i]),
            )
            for i in order
        ]

    def semantic_pool(
        self, question: str, hits: list[Passage], step: dict[str, Any]
    ) -> tuple[list[PoolChunk], np.ndarray]:
        """Re-chunk the retrieved documents (Alg 2), rank the semantic chunks by cosine to the question, keep the
        top ``candidates``."""
        s, tools = self.settings, self.tools
        doc_ids = list(dict.fromkeys(p.doc_id for p in hits))
        titles = {p.doc_id: p.title for p in hits}
        documents = [(d, self.document(d)) for d in doc_ids]
        documents = [(d, text) for d, text in documents if text.strip()]
        chunker = SemanticChunker(tools.embedder.encode, tau=s.tau, max_len=s.max_chunk_chars)
        chunks = chunker.chunk_many(documents)
        step.update(documents=len(documents), semantic_chunks=len(chunks), tau=s.tau, max_chunk_chars=s.max_chunk_chars)
        if not chunks:
            step["pool"] = []
            return [], np.zeros((0, 1))
        vectors = unit_rows(tools.embedder.encode([c.text for c in chunks]))
        scores = vectors @ unit_rows(tools.embedder.encode([question]))[0]
        order = np.argsort(-scores, kind="stable")[: s.candidates]
        prompt_chars = max(tools.passage_chars, s.max_chunk_chars)
        pool = [
            PoolChunk(
                f"{chunks[i].doc_id}#s{chunks[i].index}",
                Passage(-1, "", chunks[i].doc_id, titles[chunks[i].doc_id], chunks[i].text).prompt_text(prompt_chars),
            )
            for i in order
        ]
        step["pool"] = [c.chunk_id for c in pool]
        step["pool_scores"] = [float(scores[i]) for i in order]
        return pool, vectors[order]

    def document(self, doc_id: str) -> str:
        """The text of ``doc_id`` rebuilt from its corpus chunks (:func:`document_text`)."""
        tools = self.tools
        doc_ids = tools.column("doc_id")
        if self._docs is None:
            self._docs = {}
        for row in range(self._docs_rows, len(doc_ids)):  # rows added since (an external engine's passages) too
            self._docs.setdefault(str(doc_ids[row]), []).append(row)
        self._docs_rows = len(doc_ids)
        rows = self._docs.get(doc_id, [])
        index = self._optional_column("index")
        start, end = self._optional_column("start"), self._optional_column("end")
        texts = tools.column("text")
        return document_text(
            [
                (
                    int(index[r]) if index is not None else n,
                    str(texts[r]),
                    int(start[r]) if start is not None and end is not None else None,
                    int(end[r]) if start is not None and end is not None else None,
                )
                for n, r in enumerate(rows)
            ]
        )

    def _optional_column(self, name: str) -> list | None:
        try:
            return self.tools.column(name)
        except (KeyError, ValueError, TypeError):
            return None
