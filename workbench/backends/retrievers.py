"""Retrievers over a passage corpus: BM25 (bm25s), dense (faiss) and hybrid fusion (layer 3).

Every retriever takes batched queries, ``search(queries, k) -> list[RetrievalResult]``, returns plain numpy
results (never library objects), and adds one to ``counter.retrieval_calls`` per query. Indexes are cached on disk
under ``cache_dir("indexes")``, keyed by the corpus fingerprint and the index parameters; they are written with the
libraries' own non-pickle formats (bm25s ``.npy`` arrays saved with ``allow_pickle=False`` + JSON vocabulary; faiss
``write_index``) through a temporary sibling and an atomic rename, so two processes never see half an index.

bm25s is imported only through :func:`import_bm25s`, which keeps JAX (that bm25s imports when it is installed) off
the GPU: see :func:`keep_jax_on_cpu`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbench.backends.cost import CostCounter
from workbench.backends.embedder import TextEncoder
from workbench.core.atomic import atomic_directory
from workbench.core.errors import ConfigError, DataError
from workbench.core.hashing import stable_hash
from workbench.core.paths import cache_dir

log = logging.getLogger(__name__)

_INDEX_VERSION = 1  # bump when an index's on-disk layout or build procedure changes


# --------------------------------------------------------------------------------------------------- corpus


@dataclass(frozen=True)
class Corpus:
    """Passages to search: parallel lists of unique string ``ids`` and ``texts``; ``fingerprint`` hashes both."""

    ids: tuple[str, ...]
    texts: tuple[str, ...]
    fingerprint: str = field(init=False)

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.texts):
            raise DataError(f"{len(self.ids)} ids but {len(self.texts)} texts", "corpus")
        if len(set(self.ids)) != len(self.ids):
            raise DataError("passage ids must be unique", "corpus")
        digest = hashlib.sha256()
        for pid, text in zip(self.ids, self.texts, strict=True):
            digest.update(pid.encode("utf-8") + b"\x00" + text.encode("utf-8") + b"\x01")
        object.__setattr__(self, "fingerprint", digest.hexdigest()[:16])

    def __len__(self) -> int:
        return len(self.ids)


def as_corpus(
    passages: Any, texts: Sequence[str] | None = None, *, id_column: str = "chunk_id", text_column: str = "text"
) -> Corpus:
    """Build a :class:`Corpus` from: a Corpus; ``(ids, texts)`` given as two arguments; a list of texts (ids become
    ``"0", "1", ...``); a mapping ``{id: text}``; or a table with ``id_column`` / ``text_column`` columns (an HF
    ``datasets.Dataset``, a dict of lists, a list of dicts). Ids are converted to ``str``."""
    if isinstance(passages, Corpus):
        return passages
    if texts is not None:
        return Corpus(tuple(str(i) for i in passages), tuple(texts))
    if hasattr(passages, "column_names"):  # datasets.Dataset
        _require_columns(list(passages.column_names), id_column, text_column)
        return Corpus(tuple(str(i) for i in passages[id_column]), tuple(passages[text_column]))
    if isinstance(passages, Mapping):
        if id_column in passages and text_column in passages:
            return Corpus(tuple(str(i) for i in passages[id_column]), tuple(passages[text_column]))
        return Corpus(tuple(str(i) for i in passages), tuple(passages.values()))
    items = list(passages)
    if all(isinstance(item, str) for item in items):
        return Corpus(tuple(str(i) for i in range(len(items))), tuple(items))
    if all(isinstance(item, Mapping) for item in items):
        for item in items:
            _require_columns(list(item), id_column, text_column)
        return Corpus(tuple(str(item[id_column]) for item in items), tuple(item[text_column] for item in items))
    raise DataError("passages must be texts, {id: text}, a Corpus, or rows/columns with ids and texts", "corpus")


def _require_columns(columns: list[str], *needed: str) -> None:
    missing = [c for c in needed if c not in columns]
    if missing:
        raise DataError(f"missing column(s) {missing}; found {columns}", "corpus")


# --------------------------------------------------------------------------------------------------- results


@dataclass(eq=False)
class RetrievalResult:
    """One query's hits, best first: passage ``ids``, their corpus ``indices`` (int64), ``scores`` (float32, higher
    is better; the scale depends on the retriever) and 1-based ``ranks`` (int32). All arrays have equal length,
    possibly zero."""

    query: str
    ids: list[str]
    indices: np.ndarray
    scores: np.ndarray
    ranks: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def from_arrays(cls, query: str, corpus: Corpus, indices: np.ndarray, scores: np.ndarray) -> RetrievalResult:
        """Build a result from corpus positions and scores, already sorted best first."""
        indices = np.asarray(indices, dtype=np.int64)
        return cls(
            query=query,
            ids=[corpus.ids[i] for i in indices],
            indices=indices,
            scores=np.asarray(scores, dtype=np.float32),
            ranks=np.arange(1, len(indices) + 1, dtype=np.int32),
        )

    @classmethod
    def empty(cls, query: str) -> RetrievalResult:
        """A result with no hits."""
        return cls(query, [], np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.int32))


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` highest scores, best first; ties broken by lower position (deterministic)."""
    k = min(k, scores.shape[0])
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.arange(scores.shape[0]), -scores))
    return order[:k].astype(np.int64)


# --------------------------------------------------------------------------------------------------- base


class Retriever:
    """Base class: validates queries and ``k``, counts calls, and delegates to ``_search``.

    Subclasses set ``self.corpus`` and implement ``_search(queries, k)`` (no counting), which :class:`HybridRetriever`
    calls directly so that a fused query counts once.
    """

    corpus: Corpus
    counter: CostCounter

    def search(self, queries: Sequence[str], k: int = 5) -> list[RetrievalResult]:
        """Top-``k`` passages for each query (fewer when the corpus is smaller or nothing matches)."""
        queries = _check_queries(queries)
        if k < 1:
            raise ConfigError(f"k must be >= 1, got {k}", f"{type(self).__name__}.search")
        self.counter.retrieval_calls += len(queries)
        with self.counter.timed("retrieve"):
            return self._search(queries, k)

    def _search(self, queries: list[str], k: int) -> list[RetrievalResult]:
        raise NotImplementedError


def _check_queries(queries: Sequence[str]) -> list[str]:
    if isinstance(queries, str):
        raise DataError("search() takes a list of queries, not one string", "retriever")
    queries = list(queries)
    if not all(isinstance(q, str) for q in queries):
        raise DataError("queries must be strings", "retriever")
    return queries


def _write_file_atomically(path: Path, writer: Any) -> None:
    """Call ``writer(tmp_path)`` and rename the result onto ``path``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        writer(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------------------------------- BM25


def keep_jax_on_cpu() -> None:
    """Set ``JAX_PLATFORMS=cpu`` unless the user has set ``JAX_PLATFORMS`` (then it is left as it is).

    bm25s imports JAX when JAX is installed, and a CUDA build of JAX preallocates 75 % of the GPU's memory when its
    backend starts, memory the generator then lacks. BM25 needs no GPU. Effective only before JAX is first imported
    in the process, so it runs before every ``import bm25s`` (:func:`import_bm25s`)."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def import_bm25s() -> Any:
    """The ``bm25s`` module, imported after :func:`keep_jax_on_cpu` (the one way this package imports bm25s)."""
    keep_jax_on_cpu()
    import bm25s

    return bm25s


class BM25Retriever(Retriever):
    """Lexical retrieval with bm25s (Lucene BM25 by default; ``k1``, ``b``, ``method`` as in bm25s).

    Texts are lower-cased and split on ``\\w\\w+`` with English stop words removed (bm25s's tokenizer, no stemmer).
    Passages with a zero score (no query term) are not returned, so a query with no known term gets an empty
    result. ``index_source`` is ``"built"`` or ``"disk"`` (loaded from the index cache); ``cache=False`` skips it.
    """

    def __init__(
        self,
        passages: Any,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        method: str = "lucene",
        stopwords: str | None = "en",
        cache: bool = True,
        counter: CostCounter | None = None,
    ) -> None:
        self.corpus = as_corpus(passages)
        self.counter = counter if counter is not None else CostCounter()
        self.params = {"k1": k1, "b": b, "method": method, "stopwords": stopwords}
        self.fingerprint = stable_hash(["bm25", self.corpus.fingerprint, self.params, _INDEX_VERSION])
        self.index_source = "empty"
        self._bm25 = self._load_or_build(cache) if len(self.corpus) else None

    def _tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        bm25s = import_bm25s()

        return bm25s.tokenize(list(texts), stopwords=self.params["stopwords"], return_ids=False, show_progress=False)

    def _load_or_build(self, cache: bool) -> Any:
        bm25s = import_bm25s()

        target = cache_dir("indexes") / f"bm25-{self.fingerprint}"
        if cache and (target / "params.index.json").is_file():
            self.index_source = "disk"
            return bm25s.BM25.load(str(target), allow_pickle=False, show_progress=False)
        model = bm25s.BM25(k1=self.params["k1"], b=self.params["b"], method=self.params["method"])
        tokens = [doc if doc else [""] for doc in self._tokenize(self.corpus.texts)]
        model.index(tokens, show_progress=False)
        self.index_source = "built"
        if cache:
            with atomic_directory(target) as tmp:
                model.save(str(tmp), allow_pickle=False, show_progress=False)
        return model

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for ``query`` (float32, corpus order; zeros when no term is known)."""
        if self._bm25 is None:
            return np.zeros(0, dtype=np.float32)
        tokens = [t for t in self._tokenize([query])[0] if t in self._bm25.vocab_dict and t]
        if not tokens:
            return np.zeros(len(self.corpus), dtype=np.float32)
        return np.asarray(self._bm25.get_scores(tokens), dtype=np.float32)

    def _search(self, queries: list[str], k: int) -> list[RetrievalResult]:
        results = []
        for query in queries:
            scores = self.scores(query)
            best = top_k(scores, k)
            best = best[scores[best] > 0]
            results.append(RetrievalResult.from_arrays(query, self.corpus, best, scores[best]))
        return results


# --------------------------------------------------------------------------------------------------- dense

_DENSE_INDEXES = ("flat", "ivf", "hnsw")


class DenseRetriever(Retriever):
    """Dense retrieval: inner product over L2-normalised embeddings (= cosine) in a faiss index.

    ``index``: ``"flat"`` (exact, default), ``"ivf"`` (``nlist`` cells, clamped to the corpus size; ``nprobe`` cells
    searched) or ``"hnsw"`` (``hnsw_m`` links, ``ef_construction``; ``ef_search`` at query time). Build parameters
    and the embedder fingerprint key the on-disk index; ``nprobe`` / ``ef_search`` are query-time only.
    ``embedder`` is anything with ``encode`` / ``dim`` / ``fingerprint``, e.g. an
    :class:`~workbench.backends.embedder.Embedder`.
    """

    def __init__(
        self,
        passages: Any,
        embedder: TextEncoder,
        *,
        index: str = "flat",
        nlist: int = 64,
        nprobe: int = 8,
        hnsw_m: int = 32,
        ef_construction: int = 80,
        ef_search: int = 64,
        seed: int = 0,
        cache: bool = True,
        counter: CostCounter | None = None,
    ) -> None:
        if index not in _DENSE_INDEXES:
            raise ConfigError(f"unknown dense index '{index}' (choose from {', '.join(_DENSE_INDEXES)})", "index")
        self.corpus = as_corpus(passages)
        self.embedder = embedder
        self.counter = counter if counter is not None else CostCounter()
        self.index_kind = index
        self.nprobe, self.ef_search = nprobe, ef_search
        build = {"index": index, "seed": seed}
        if index == "ivf":
            build["nlist"] = max(1, min(nlist, len(self.corpus)))
        if index == "hnsw":
            build.update(hnsw_m=hnsw_m, ef_construction=ef_construction)
        self.build_params = build
        self.fingerprint = stable_hash(["dense", self.corpus.fingerprint, embedder.fingerprint, build, _INDEX_VERSION])
        self.index_source = "empty"
        self._index = self._load_or_build(cache) if len(self.corpus) else None

    def _load_or_build(self, cache: bool) -> Any:
        import faiss

        target = cache_dir("indexes") / f"dense-{self.fingerprint}.faiss"
        if cache and target.is_file():
            self.index_source = "disk"
            index = faiss.read_index(str(target))
        else:
            index = self._build(faiss)
            self.index_source = "built"
            if cache:
                _write_file_atomically(target, lambda tmp: faiss.write_index(index, tmp))
        self._apply_search_params(faiss, index)
        return index

    def _build(self, faiss: Any) -> Any:
        vectors = np.ascontiguousarray(self.embedder.encode(list(self.corpus.texts)), dtype=np.float32)
        dim = vectors.shape[1]
        if self.index_kind == "flat":
            index = faiss.IndexFlatIP(dim)
        elif self.index_kind == "ivf":
            quantizer = faiss.IndexFlatIP(dim)
            index = faiss.IndexIVFFlat(quantizer, dim, self.build_params["nlist"], faiss.METRIC_INNER_PRODUCT)
            index.cp.seed = self.build_params["seed"]
            index.train(vectors)
        else:
            index = faiss.IndexHNSWFlat(dim, self.build_params["hnsw_m"], faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = self.build_params["ef_construction"]
        index.add(vectors)
        return index

    def _apply_search_params(self, faiss: Any, index: Any) -> None:
        if self.index_kind == "ivf":
            faiss.extract_index_ivf(index).nprobe = self.nprobe
        elif self.index_kind == "hnsw":
            index.hnsw.efSearch = max(self.ef_search, 1)

    def _search(self, queries: list[str], k: int) -> list[RetrievalResult]:
        if self._index is None or not queries:
            return [RetrievalResult.empty(q) for q in queries]
        vectors = np.ascontiguousarray(self.embedder.encode(queries), dtype=np.float32)
        k_eff = min(k, len(self.corpus))
        if self.index_kind == "hnsw":
            self._index.hnsw.efSearch = max(self.ef_search, k_eff)
        scores, indices = self._index.search(vectors, k_eff)
        results = []
        for query, row_scores, row_idx in zip(queries, scores, indices, strict=True):
            keep = row_idx >= 0  # faiss pads with -1 when it finds fewer than k
            results.append(RetrievalResult.from_arrays(query, self.corpus, row_idx[keep], row_scores[keep]))
        return results


class PooledDenseRetriever(Retriever):
    """Dense scoring over a sparse candidate pool: the top ``pool`` passages of ``base`` (e.g. BM25) for each query
    are embedded and ranked by cosine similarity with the query.

    A substitute for a full dense index when embedding the whole corpus is too slow (10,033 MiniLM passage vectors
    take tens of minutes on two CPU cores): only the pooled passages are embedded, through the embedder's on-disk
    cache, so a passage is embedded once across queries and runs. It can only find passages the base retriever puts
    in the pool, so its recall is bounded by the base retriever's recall@pool. Queries are embedded in one batch;
    one retrieval call is counted per query.
    """

    def __init__(self, base: Retriever, embedder: Any, *, pool: int = 50, counter: CostCounter | None = None) -> None:
        if pool < 1:
            raise ConfigError(f"pool must be >= 1, got {pool}", "PooledDenseRetriever")
        self.base = base
        self.corpus = base.corpus
        self.embedder = embedder
        self.pool = pool
        self.counter = counter if counter is not None else CostCounter()

    def _search(self, queries: list[str], k: int) -> list[RetrievalResult]:
        pools = self.base._search(queries, max(self.pool, k))
        wanted = sorted({int(i) for r in pools for i in r.indices})
        if not wanted:
            return [RetrievalResult.empty(q) for q in queries]
        rows = {idx: n for n, idx in enumerate(wanted)}
        passages = self._unit(self.embedder.encode([self.corpus.texts[i] for i in wanted]))
        query_vecs = self._unit(self.embedder.encode(queries))
        results = []
        for query, q_vec, pool in zip(queries, query_vecs, pools, strict=True):
            idx = np.asarray(pool.indices, dtype=np.int64)
            if idx.size == 0:
                results.append(RetrievalResult.empty(query))
                continue
            sims = passages[[rows[int(i)] for i in idx]] @ q_vec
            order = top_k(sims, k)
            results.append(RetrievalResult.from_arrays(query, self.corpus, idx[order], sims[order]))
        return results

    @staticmethod
    def _unit(vectors: Any) -> np.ndarray:
        matrix = np.asarray(vectors, dtype=np.float32)
        return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)


# --------------------------------------------------------------------------------------------------- hybrid

NORMALIZATIONS = ("minmax", "zscore")
FUSIONS = ("weighted", "rrf")
WeightsArg = Mapping[str, float] | Sequence[Mapping[str, float]] | np.ndarray | None


def normalize_scores(scores: np.ndarray, method: str) -> np.ndarray:
    """Per-query normalisation of one channel's candidate scores.

    ``minmax``: ``(s - min) / (max - min)``, all ones when every score is equal. ``zscore``: ``(s - mean) / std``
    (population std), all zeros when every score is equal. An empty array stays empty.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size == 0:
        return scores
    if method == "minmax":
        spread = scores.max() - scores.min()
        return (scores - scores.min()) / spread if spread > 0 else np.ones_like(scores)
    if method == "zscore":
        std = scores.std()
        return (scores - scores.mean()) / std if std > 0 else np.zeros_like(scores)
    raise ConfigError(f"unknown normalization '{method}' (choose from {', '.join(NORMALIZATIONS)})", "normalization")


class HybridRetriever(Retriever):
    """Fuses several retrievers over the same corpus.

    Each channel returns its top ``candidate_k`` (default ``max(4k, 20)``) passages; the union is re-ranked by
    - ``fusion="weighted"``: ``Σ_c w_c · norm_c(s)``, with ``norm_c`` the channel's ``normalization`` (``minmax`` or
      ``zscore``) over its own candidates; a passage a channel did not return gets that channel's lowest normalised
      candidate score (0 for min-max), and nothing at all if the channel returned no candidates;
    - ``fusion="rrf"``: reciprocal-rank fusion ``Σ_c w_c / (rrf_k + rank_c)`` (``rrf_k=60``; missing: no term).
    Weights are non-negative, not renormalised, default 1 per channel, and may be given per query at search time
    (InSemRAG's dynamic channel weights). Ties are broken by corpus order. Counts one retrieval call per query
    (channels are queried through their uncounted ``_search``).
    """

    def __init__(
        self,
        channels: Mapping[str, Retriever],
        *,
        weights: Mapping[str, float] | None = None,
        fusion: str = "weighted",
        normalization: str = "minmax",
        rrf_k: float = 60.0,
        candidate_k: int | None = None,
        counter: CostCounter | None = None,
    ) -> None:
        if not channels:
            raise ConfigError("a hybrid retriever needs at least one channel", "channels")
        if fusion not in FUSIONS:
            raise ConfigError(f"unknown fusion '{fusion}' (choose from {', '.join(FUSIONS)})", "fusion")
        if normalization not in NORMALIZATIONS:
            raise ConfigError(f"unknown normalization '{normalization}' (choose {', '.join(NORMALIZATIONS)})", "norm")
        self.channels = dict(channels)
        self.names = list(self.channels)
        fingerprints = {r.corpus.fingerprint for r in self.channels.values()}
        if len(fingerprints) != 1:
            raise ConfigError("all channels must search the same corpus", "channels")
        self.corpus = next(iter(self.channels.values())).corpus
        self.fusion, self.normalization, self.rrf_k = fusion, normalization, rrf_k
        self.candidate_k = candidate_k
        self.counter = counter if counter is not None else CostCounter()
        self.weights = self._weight_row(weights or dict.fromkeys(self.names, 1.0))

    def _weight_row(self, weights: Mapping[str, float]) -> np.ndarray:
        unknown = set(weights) - set(self.names)
        if unknown:
            raise ConfigError(f"unknown channel(s) {sorted(unknown)}; channels are {self.names}", "weights")
        row = np.array([float(weights.get(name, 0.0)) for name in self.names])
        if (row < 0).any() or row.sum() <= 0 or not np.isfinite(row).all():
            raise ConfigError(f"weights must be finite, non-negative and not all zero, got {dict(weights)}", "weights")
        return row

    def _weight_matrix(self, weights: WeightsArg, n: int) -> np.ndarray:
        if weights is None:
            return np.tile(self.weights, (n, 1))
        if isinstance(weights, Mapping):
            return np.tile(self._weight_row(weights), (n, 1))
        if isinstance(weights, np.ndarray):
            if weights.shape != (n, len(self.names)):
                raise ConfigError(f"weights array must have shape ({n}, {len(self.names)})", "weights")
            return np.stack([self._weight_row(dict(zip(self.names, row, strict=True))) for row in weights])
        weights = list(weights)
        if len(weights) != n:
            raise ConfigError(f"{len(weights)} weight mappings for {n} queries", "weights")
        return np.stack([self._weight_row(w) for w in weights]) if n else np.zeros((0, len(self.names)))

    def search(self, queries: Sequence[str], k: int = 5, *, weights: WeightsArg = None) -> list[RetrievalResult]:
        """Fused top-``k`` per query; ``weights`` overrides the channel weights for all queries (a mapping) or per
        query (a list of mappings, or an ``(n_queries, n_channels)`` array in channel order)."""
        queries = _check_queries(queries)
        if k < 1:
            raise ConfigError(f"k must be >= 1, got {k}", "HybridRetriever.search")
        matrix = self._weight_matrix(weights, len(queries))
        self.counter.retrieval_calls += len(queries)
        with self.counter.timed("retrieve"):
            return self._fuse_all(queries, k, matrix)

    def _search(self, queries: list[str], k: int) -> list[RetrievalResult]:
        return self._fuse_all(queries, k, self._weight_matrix(None, len(queries)))

    def _fuse_all(self, queries: list[str], k: int, matrix: np.ndarray) -> list[RetrievalResult]:
        depth = self.candidate_k or max(4 * k, 20)
        per_channel = {name: self.channels[name]._search(queries, depth) for name in self.names}
        return [
            self._fuse(query, [per_channel[name][i] for name in self.names], matrix[i], k)
            for i, query in enumerate(queries)
        ]

    def _fuse(self, query: str, hits: list[RetrievalResult], weights: np.ndarray, k: int) -> RetrievalResult:
        union = sorted({int(i) for hit in hits for i in hit.indices})
        if not union:
            return RetrievalResult.empty(query)
        position = {idx: j for j, idx in enumerate(union)}
        fused = np.zeros(len(union), dtype=np.float64)
        for hit, weight in zip(hits, weights, strict=True):
            if len(hit) == 0 or weight == 0:
                continue
            if self.fusion == "rrf":
                contrib = np.zeros(len(union))
                values = 1.0 / (self.rrf_k + hit.ranks.astype(np.float64))
            else:
                values = normalize_scores(hit.scores, self.normalization)
                contrib = np.full(len(union), values.min())
            for idx, value in zip(hit.indices, values, strict=True):
                contrib[position[int(idx)]] = value
            fused += weight * contrib
        best = top_k(fused, k)
        chosen = np.array(union, dtype=np.int64)[best]
        return RetrievalResult.from_arrays(query, self.corpus, chosen, fused[best])
