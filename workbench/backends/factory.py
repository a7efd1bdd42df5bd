"""Build the backends from plain settings: the one place that turns a model reference and a kind into an object.

The stages (through :class:`workbench.stages.context.Resources`) and the runtime (through a bundle's manifest) both
call these, so a run and a deployed bundle get their generator, embedder, NLI judge and retriever built the same way.
Each function imports its backend lazily; nothing here knows about recipes or bundles.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.backends.cost import CostCounter
from workbench.core.errors import ConfigError

JUDGE_KINDS = ("answer_equivalence", "cross_encoder", "hf", "llm")
RETRIEVER_KINDS = ("bm25", "dense", "hybrid")


def resolve_device(device: str) -> str:
    """``"auto"`` → ``"cuda"`` when torch sees a GPU, else ``"cpu"``; any other value unchanged."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def build_generator(
    model: Any,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    max_context: int | None = None,
    batch_size: int = 8,
    cache: bool = True,
    counter: CostCounter | None = None,
    seed: int = 0,
) -> Any:
    """A :class:`~workbench.backends.generator.Generator` for ``model`` (an embedded name, a local directory, an
    explicit hub id or a resolved model), with the on-disk generation cache when ``cache``."""
    from workbench.backends.generator import Generator

    generation_cache = None
    if cache:
        from workbench.backends.gencache import GenerationCache

        generation_cache = GenerationCache()
    return Generator(
        model,
        device=resolve_device(device),
        dtype=dtype,
        max_context=max_context,
        batch_size=batch_size,
        cache=generation_cache,
        counter=counter,
        seed=seed,
    )


def build_embedder(
    model: str | Path = "minilm", *, batch_size: int = 64, counter: CostCounter | None = None, device: str = "cpu"
) -> Any:
    """A :class:`~workbench.backends.embedder.Embedder` for ``model`` (embedded name, local directory or hub id)."""
    from workbench.backends.embedder import Embedder

    return Embedder(model, batch_size=batch_size, counter=counter, device=resolve_device(device))


def build_judge(
    kind: str,
    *,
    model: str | Path | None = None,
    embedder: Callable[[], Any] | None = None,
    generator: Callable[[], Any] | None = None,
    batch_size: int = 32,
    counter: CostCounter | None = None,
) -> Any:
    """The NLI judge ``kind``: ``answer_equivalence`` (rules + the embedder's cosine), ``cross_encoder`` / ``hf``
    (a checkpoint directory or hub id in ``model``), or ``llm`` (the generator as judge). ``embedder`` and
    ``generator`` are callables returning the shared objects, so only the one a judge needs is built."""
    if kind == "answer_equivalence":
        from workbench.backends.nli import AnswerEquivalenceJudge

        if embedder is None:
            raise ConfigError("the answer_equivalence judge needs an embedder", "nli.kind")
        return AnswerEquivalenceJudge(embedder(), counter=counter)
    if kind in ("cross_encoder", "hf"):
        from workbench.backends.nli import CrossEncoderNLI, HFSequenceClassificationNLI

        cls = CrossEncoderNLI if kind == "cross_encoder" else HFSequenceClassificationNLI
        return cls(model, batch_size=batch_size, counter=counter)
    if kind == "llm":
        from workbench.backends.nli_llm import LLMJudgeNLI

        if generator is None:
            raise ConfigError("the llm judge needs a generator", "nli.kind")
        return LLMJudgeNLI(generator())
    raise ConfigError(f"unknown NLI judge {kind!r} (known: {', '.join(JUDGE_KINDS)})", "nli.kind")


def build_retriever(
    kind: str, corpus: Any, *, embedder: Callable[[], Any] | None = None, counter: CostCounter | None = None
) -> Any:
    """A retriever over ``corpus`` (a Dataset or a mapping of columns with ``chunk_id`` and ``text``): ``bm25``,
    ``dense`` (the embedder's vectors) or ``hybrid`` (both, fused)."""
    from workbench.backends.retrievers import BM25Retriever, DenseRetriever, HybridRetriever

    if kind not in RETRIEVER_KINDS:
        raise ConfigError(f"unknown retriever {kind!r} (known: {', '.join(RETRIEVER_KINDS)})", "retrieval.retriever")
    if kind == "bm25":
        return BM25Retriever(corpus, counter=counter)
    if embedder is None:
        raise ConfigError(f"the {kind} retriever needs an embedder", "retrieval.retriever")
    dense = DenseRetriever(corpus, embedder(), counter=counter)
    if kind == "dense":
        return dense
    return HybridRetriever({"bm25": BM25Retriever(corpus), "dense": dense}, counter=counter)
