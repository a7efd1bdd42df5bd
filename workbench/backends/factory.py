"""Build the backends from plain settings: the one place that turns a model reference and a kind into an object.

The stages (through :class:`workbench.stages.context.Resources`) and the runtime (through a bundle's manifest) both
call these, so a run and a deployed bundle get their generator, embedder, NLI judge and retriever built the same way.
Each function imports its backend lazily; nothing here knows about recipes or bundles.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.backends.cost import CostCounter
from workbench.backends.device import DEVICES as DEVICES  # re-exported: the factory's public device names
from workbench.backends.device import check_device as check_device
from workbench.backends.device import resolve_device
from workbench.backends.served_client import ServedSettings
from workbench.backends.shared_weights import share_equal_weights
from workbench.core.errors import AssetError, ConfigError, WorkbenchError
from workbench.core.memory import return_freed_memory


@contextlib.contextmanager
def backend_errors(what: str, where: str) -> Iterator[None]:
    """Turn any exception a third-party library raises while ``what`` is built (a bad checkpoint, an unusable
    device or dtype) into a one-line :class:`AssetError` at ``where``; workbench errors pass unchanged."""
    try:
        yield
    except WorkbenchError:
        raise
    except Exception as exc:  # transformers, torch, safetensors, sentence-transformers raise many types
        lines = str(exc).strip().splitlines()
        detail = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
        raise AssetError(f"cannot build the {what}: {detail}", where) from exc


def _model_where(model: Any) -> str:
    """How a model reference is named in errors: a resolved model's path, else the reference itself."""
    return str(getattr(model, "path", model))


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
    device_key: str = "device",
    prompt_format: str = "auto",
    batch_rows: int | None = None,
    share_weights_with: Any = None,
) -> Any:
    """A :class:`~workbench.backends.generator.Generator` for ``model`` (an embedded name, a local directory, an
    explicit hub id or a resolved model), with the on-disk generation cache when ``cache``, rendering its prompts in
    ``prompt_format`` (``auto`` | ``chat`` | ``completion``, see the generator); ``batch_rows`` None keeps the
    generator's default. ``share_weights_with``: a generator already loaded (a second model beside the run's, e.g.
    a distilled controller over the reader's base) whose parameters the new model uses wherever they are equal
    (:func:`~workbench.backends.shared_weights.share_equal_weights`; one resident copy of the base's layers), the
    freed copies handed back to the system; ignored when it holds no in-process model (a served one).

    ``device`` goes through :func:`resolve_device` (errors name ``device_key``); anything else that fails while the
    model loads is a one-line :class:`AssetError` naming the model."""
    from workbench.backends.generator import BATCH_ROWS, Generator

    generation_cache = None
    if cache:
        from workbench.backends.gencache import GenerationCache

        generation_cache = GenerationCache()
    torch_device = resolve_device(device, device_key)
    with backend_errors(f"generator on {torch_device} ({dtype})", _model_where(model)):
        generator = Generator(
            model,
            device=torch_device,
            dtype=dtype,
            max_context=max_context,
            batch_size=batch_size,
            cache=generation_cache,
            counter=counter,
            seed=seed,
            prompt_format=prompt_format,
            batch_rows=BATCH_ROWS if batch_rows is None else batch_rows,
        )
    donor = getattr(share_weights_with, "model", None)
    if donor is not None and not getattr(share_weights_with, "served", False):
        _share_weights(generator, donor)
    return generator


def _share_weights(generator: Any, donor: Any) -> None:
    """Point ``generator``'s model at ``donor``'s equal tensors and return the freed copies to the system."""

    shared = share_equal_weights(generator.model, donor)
    if shared:
        return_freed_memory()
        logging.getLogger(__name__).info(
            "%s shares %.0f MB of weights with the model already loaded", generator.resolved.ref, shared / 1e6
        )


def build_served_generator(
    *,
    base_url: str,
    model: str,
    tokenizer: str | None = None,
    api_key_env: str | None = None,
    timeout_s: float = 120.0,
    retries: int = 3,
    max_concurrency: int = 16,
    top_logprobs: int = 20,
    max_context: int | None = None,
    batch_size: int = 8,
    cache: bool = True,
    counter: CostCounter | None = None,
    seed: int = 0,
    prompt_format: str = "auto",
    capabilities: Any = None,
    probe_record: Any = None,
) -> Any:
    """A :class:`~workbench.backends.served.ServedGenerator` for the model ``model`` served at ``base_url`` (probed
    unless ``capabilities`` are given), with the on-disk generation cache when ``cache``; a server that cannot be
    reached or does not serve ``model`` is a one-line :class:`~workbench.backends.served_client.ServedModelError`."""
    from workbench.backends.served import ServedGenerator

    generation_cache = None
    if cache:
        from workbench.backends.gencache import GenerationCache

        generation_cache = GenerationCache()
    settings = ServedSettings(base_url, model, api_key_env, timeout_s, retries, max_concurrency)
    return ServedGenerator(
        settings,
        tokenizer=tokenizer,
        max_context=max_context,
        cache=generation_cache,
        counter=counter,
        seed=seed,
        batch_size=batch_size,
        prompt_format=prompt_format,
        top_logprobs=top_logprobs,
        capabilities=capabilities,
        probe_record=probe_record,
    )


def build_embedder(
    model: str | Path = "minilm",
    *,
    batch_size: int = 64,
    counter: CostCounter | None = None,
    device: str = "cpu",
    cache: bool = True,
    device_key: str = "device",
) -> Any:
    """A :class:`~workbench.backends.embedder.Embedder` for ``model`` (embedded name, local directory or hub id),
    with the on-disk embedding cache when ``cache``; errors as in :func:`build_generator`."""
    from workbench.backends.embedder import Embedder

    torch_device = resolve_device(device, device_key)
    with backend_errors(f"embedder on {torch_device}", _model_where(model)):
        return Embedder(model, batch_size=batch_size, counter=counter, device=torch_device, cache=cache)


def build_served_embedder(
    *,
    base_url: str,
    model: str,
    api_key_env: str | None = None,
    timeout_s: float = 60.0,
    retries: int = 3,
    max_concurrency: int = 8,
    batch_size: int = 64,
    encoding_format: str = "float",
    counter: CostCounter | None = None,
    cache: bool = True,
) -> Any:
    """A :class:`~workbench.backends.served_embedder.ServedEmbedder` for the model ``model`` served at ``base_url``
    (``/v1/embeddings``; probed once), with the on-disk embedding cache when ``cache``; a server that cannot be
    reached or does not embed with ``model`` is a one-line :class:`~workbench.backends.served_client.ServedModelError`
    naming the URL."""
    from workbench.backends.served_embedder import ServedEmbedder

    settings = ServedSettings(base_url, model, api_key_env, timeout_s, retries, max_concurrency, section="embedder")
    return ServedEmbedder(
        settings, batch_size=batch_size, cache=cache, counter=counter, encoding_format=encoding_format
    )


@dataclass(frozen=True)
class JudgeRequest:
    """What a judge builder may use: the checkpoint, lazily built shared objects, the counter and the device."""

    kind: str
    model: str | Path | None
    embedder: Callable[[], Any] | None
    generator: Callable[[], Any] | None
    batch_size: int
    counter: CostCounter | None
    device: str
    device_key: str


def _answer_equivalence(req: JudgeRequest) -> Any:
    from workbench.backends.nli import AnswerEquivalenceJudge

    if req.embedder is None:
        raise ConfigError("the answer_equivalence judge needs an embedder", "nli.kind")
    return AnswerEquivalenceJudge(req.embedder(), counter=req.counter)


def _model_judge(req: JudgeRequest) -> Any:
    from workbench.backends.nli import CrossEncoderNLI, HFSequenceClassificationNLI

    cls = CrossEncoderNLI if req.kind == "cross_encoder" else HFSequenceClassificationNLI
    torch_device = resolve_device(req.device, req.device_key)
    with backend_errors(f"{req.kind} NLI judge on {torch_device}", _model_where(req.model)):
        return cls(req.model, batch_size=req.batch_size, counter=req.counter, device=torch_device)


def _llm_judge(req: JudgeRequest) -> Any:
    from workbench.backends.nli_llm import LLMJudgeNLI

    if req.generator is None:
        raise ConfigError("the llm judge needs a generator", "nli.kind")
    return LLMJudgeNLI(req.generator())


JUDGES: dict[str, Callable[[JudgeRequest], Any]] = {
    "answer_equivalence": _answer_equivalence,
    "cross_encoder": _model_judge,
    "hf": _model_judge,
    "llm": _llm_judge,
}
"""Every NLI judge kind and its builder: adding a judge is one entry here (and its backend module)."""

JUDGE_KINDS: tuple[str, ...] = tuple(JUDGES)


def build_judge(
    kind: str,
    *,
    model: str | Path | None = None,
    embedder: Callable[[], Any] | None = None,
    generator: Callable[[], Any] | None = None,
    batch_size: int = 32,
    counter: CostCounter | None = None,
    device: str = "cpu",
    device_key: str = "device",
) -> Any:
    """The NLI judge ``kind`` (a key of :data:`JUDGES`): ``answer_equivalence`` (rules + the embedder's cosine),
    ``cross_encoder`` / ``hf`` (a checkpoint directory or hub id in ``model``), or ``llm`` (the generator as judge).
    ``embedder`` and ``generator`` are callables returning the shared objects, so only the one a judge needs is built.

    ``device`` (through :func:`resolve_device`; errors name ``device_key``) places the ``cross_encoder`` / ``hf``
    model; the other two judges have no model of their own and run where the embedder / generator runs."""
    builder = JUDGES.get(kind)
    if builder is None:
        raise ConfigError(f"unknown NLI judge {kind!r} (known: {', '.join(JUDGE_KINDS)})", "nli.kind")
    return builder(JudgeRequest(kind, model, embedder, generator, batch_size, counter, device, device_key))


Builder = Callable[[Any, Callable[[], Any] | None, CostCounter | None, Any], Any]


def _bm25(corpus: Any, embedder: Callable[[], Any] | None, counter: CostCounter | None, connection: Any) -> Any:
    from workbench.backends.retrievers import BM25Retriever

    return BM25Retriever(corpus, counter=counter)


def _dense(corpus: Any, embedder: Callable[[], Any] | None, counter: CostCounter | None, connection: Any) -> Any:
    from workbench.backends.retrievers import DenseRetriever

    if embedder is None:
        raise ConfigError("the dense retriever needs an embedder", "retrieval.backend")
    return DenseRetriever(corpus, embedder(), counter=counter)


def _hybrid(corpus: Any, embedder: Callable[[], Any] | None, counter: CostCounter | None, connection: Any) -> Any:
    from workbench.backends.retrievers import HybridRetriever

    if embedder is None:
        raise ConfigError("the hybrid retriever needs an embedder", "retrieval.backend")
    parts = {"bm25": _bm25(corpus, None, None, None), "dense": _dense(corpus, embedder, counter, None)}
    return HybridRetriever(parts, counter=counter)


def _external(module: str, cls: str) -> Builder:
    """The builder of an external engine's retriever (class ``cls`` of ``module``, imported on first use): it needs
    ``retrieval.connection``, and the embedder on the dense channel unless the engine embeds the queries itself
    (``embeds_queries`` False: a retriever server)."""

    def build(corpus: Any, embedder: Callable[[], Any] | None, counter: CostCounter | None, connection: Any) -> Any:
        if connection is None:
            raise ConfigError("an external retrieval backend needs retrieval.connection", "retrieval.connection")
        retriever = getattr(importlib.import_module(module), cls)
        needs_vectors = connection.channel == "dense" and retriever.embeds_queries
        if needs_vectors and embedder is None:
            raise ConfigError("the dense channel needs an embedder", "retrieval.connection.channel")
        return retriever(corpus, connection, embedder=embedder() if needs_vectors else None, counter=counter)

    return build


RETRIEVERS: dict[str, Builder] = {
    "bm25": _bm25,
    "dense": _dense,
    "hybrid": _hybrid,
    "pgvector": _external("workbench.backends.retrieval_pgvector", "PgvectorRetriever"),
    "milvus": _external("workbench.backends.retrieval_milvus", "MilvusRetriever"),
    "http": _external("workbench.backends.retrieval_http", "HttpRetriever"),
    "lucene": _external("workbench.backends.retrieval_lucene", "LuceneRetriever"),
    "elasticsearch": _external("workbench.backends.retrieval_elasticsearch", "ElasticsearchRetriever"),
    "opensearch": _external("workbench.backends.retrieval_opensearch", "OpenSearchRetriever"),
}
"""Every retriever kind and its builder ``(corpus, embedder, counter, connection) -> retriever``: a new kind is one
entry (and its capabilities in :data:`workbench.backends.retrieval_engines.ENGINES`)."""

RETRIEVER_KINDS: tuple[str, ...] = tuple(RETRIEVERS)


def build_retriever(
    kind: str,
    corpus: Any,
    *,
    embedder: Callable[[], Any] | None = None,
    counter: CostCounter | None = None,
    connection: Any = None,
) -> Any:
    """A retriever over ``corpus`` (a Dataset or a mapping of columns with ``chunk_id`` and ``text``) of ``kind``, a
    key of :data:`RETRIEVERS`: ``bm25``, ``dense`` (the embedder's vectors), ``hybrid`` (both, fused), or an
    external engine (``pgvector``, ``milvus``, ``lucene``, ``elasticsearch``, ``opensearch``, a ``http`` retriever
    server) reached through ``connection`` (a :class:`~workbench.backends.retrieval_engines.Connection`), holding
    ``corpus``'s passages under their chunk ids (or returning the passages' text with their ids)."""
    builder = RETRIEVERS.get(kind)
    if builder is None:
        raise ConfigError(f"unknown retriever {kind!r} (known: {', '.join(RETRIEVER_KINDS)})", "retrieval.backend")
    return builder(corpus, embedder, counter, connection)
