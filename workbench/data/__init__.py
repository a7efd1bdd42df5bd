"""Data layer: the QA schema, dataset loaders (local files, hub datasets, the built-in wiki-qa), corpora, chunkers,
the NLI label order (``nli_labels``) and the NLI pair builder (``nli_pairs``).

Names are imported lazily, so ``workbench.data.chunkers`` can be used without importing ``datasets``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "QA_FEATURES": "schema",
    "QAExample": "schema",
    "Passage": "schema",
    "examples_to_dataset": "schema",
    "validate_qa_dataset": "schema",
    "validate_qa_row": "schema",
    "load_qa_dataset": "loaders",
    "load_raw_local": "loaders",
    "WikiArticle": "wikiqa",
    "load_articles": "wikiqa",
    "build_wikiqa": "wikiqa",
    "save_dataset_dict": "dataset_store",
    "load_saved_dataset_dict": "dataset_store",
    "build_corpus": "corpus",
    "Chunk": "chunkers",
    "ChunkIndex": "chunkers",
    "FixedSizeChunker": "chunkers",
    "RecursiveChunker": "chunkers",
    "SemanticChunker": "chunkers",
    "split_sentences": "chunkers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import the public names on first use (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'workbench.data' has no attribute {name!r}")
    return getattr(importlib.import_module(f"workbench.data.{_EXPORTS[name]}"), name)
