"""What ``workbench serve-retriever`` serves for a recipe: the run's retriever over the run's corpus.

The corpus is the one ``build_data`` makes from the recipe's data section (:func:`~workbench.stages.index_engine.
recipe_corpus`: the embedded summaries or the user's corpus file, chunked as ``data.chunking`` says) and the
retriever the one the stages build (:meth:`~workbench.stages.context.Resources.retriever`: ``retrieval.backend``
in-process over that corpus, or the user's engine through ``retrieval.connection``, with the recipe's embedder), so
a client of the server retrieves exactly what a run of the recipe would.
"""

from __future__ import annotations

from typing import Any

from workbench.backends.cost import CostCounter
from workbench.stages.context import Resources


def recipe_retriever(config: Any) -> Any:
    """A :class:`~workbench.serve.retriever_app.ServedIndex` of the recipe ``config``'s retriever and corpus, built
    now (an in-process index is built or loaded from its cache; an engine is reached and checked): a one-line
    :class:`~workbench.core.errors.WorkbenchError` when it cannot be."""
    from workbench.backends.retrieval_engines import ENGINES
    from workbench.serve.retriever_app import ServedIndex
    from workbench.stages.index_engine import recipe_corpus

    section = config.retrieval
    spec = ENGINES[section.backend]
    corpus = recipe_corpus(config)
    retriever = Resources(config, CostCounter()).retriever(corpus)
    channels = (section.connection.channel,) if spec.external else tuple(sorted(spec.channels))
    index = section.connection.index if spec.external else None
    return ServedIndex(retriever, corpus, section.backend, channels, index)
