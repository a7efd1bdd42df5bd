"""Retrievers: BM25 on a hand-made corpus, dense with a fake embedder, hybrid fusion against hand-computed scores,
index caching, and the edge cases (empty corpus, k beyond the corpus, queries that match nothing)."""

from __future__ import annotations

import hashlib
import math
import re

import numpy as np
import pytest

from workbench.backends.cost import CostCounter
from workbench.backends.retrievers import (
    BM25Retriever,
    Corpus,
    DenseRetriever,
    HybridRetriever,
    PooledDenseRetriever,
    RetrievalResult,
    Retriever,
    as_corpus,
    normalize_scores,
    top_k,
)
from workbench.core.errors import ConfigError, DataError


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))


DOCS = {
    "paris": "Paris is the capital and largest city of France, on the river Seine.",
    "nile": "The Nile is the longest river in Africa and flows north into the Mediterranean Sea.",
    "einstein": "Albert Einstein developed the theory of relativity and won the Nobel Prize in Physics.",
    "hamlet": "Hamlet is a tragedy written by William Shakespeare about a prince of Denmark.",
    "everest": "Mount Everest is the highest mountain on Earth, in the Himalayas.",
    "python": "Python is a programming language created by Guido van Rossum.",
    "moon": "The Moon is the only natural satellite of Earth and orbits it every 27 days.",
    "photosynthesis": "Photosynthesis converts light energy into chemical energy in plants and algae.",
    "piano": "The piano is a keyboard instrument whose hammers strike strings.",
    "tokyo": "Tokyo is the capital of Japan and the most populous metropolitan area in the world.",
}
CORPUS = Corpus(tuple(DOCS), tuple(DOCS.values()))


class HashingEmbedder:
    """A deterministic bag-of-words embedder (feature hashing), standing in for a sentence model."""

    def __init__(self, dim: int = 256) -> None:
        self.dim, self.fingerprint, self.corpus_calls = dim, "hashing-v1", 0

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in re.findall(r"\w+", text.lower()):
                out[row, int(hashlib.md5(token.encode()).hexdigest(), 16) % self.dim] += 1.0
        if len(texts) > 3:
            self.corpus_calls += 1
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


# ----------------------------------------------------------------------------------------------- corpus


def test_as_corpus_accepts_lists_mappings_rows_and_datasets():
    from datasets import Dataset

    assert as_corpus(["a", "b"]).ids == ("0", "1")
    assert as_corpus({"x": "a"}).texts == ("a",)
    rows = [{"chunk_id": 7, "text": "a"}, {"chunk_id": 8, "text": "b"}]
    assert as_corpus(rows).ids == ("7", "8")
    dataset = Dataset.from_dict({"chunk_id": ["c1", "c2"], "text": ["a", "b"], "extra": [1, 2]})
    corpus = as_corpus(dataset)
    assert corpus.ids == ("c1", "c2") and corpus.fingerprint == as_corpus(["c1", "c2"], ["a", "b"]).fingerprint
    assert as_corpus(["a", "b"]).fingerprint != as_corpus(["a", "c"]).fingerprint
    with pytest.raises(DataError):
        as_corpus(["x", "x"], ["a", "b"])
    with pytest.raises(DataError):
        as_corpus(Dataset.from_dict({"id": ["c1"], "text": ["a"]}))


def test_top_k_breaks_ties_by_position():
    assert top_k(np.array([1.0, 3.0, 3.0, 2.0]), 3).tolist() == [1, 2, 3]
    assert top_k(np.array([1.0]), 5).tolist() == [0]
    assert top_k(np.zeros(0), 2).tolist() == []


# ----------------------------------------------------------------------------------------------- BM25


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What is the capital of France?", "paris"),
        ("longest river in Africa", "nile"),
        ("who wrote the tragedy Hamlet", "hamlet"),
        ("highest mountain Himalayas", "everest"),
        ("theory of relativity", "einstein"),
        ("programming language Guido", "python"),
    ],
)
def test_bm25_top1(query, expected):
    [result] = BM25Retriever(CORPUS).search([query], k=3)
    assert result.ids[0] == expected
    assert result.ranks.tolist() == list(range(1, len(result) + 1))
    assert np.all(np.diff(result.scores) <= 0) and result.scores.dtype == np.float32


def test_bm25_counts_calls_and_handles_k_and_unmatched_queries():
    counter = CostCounter()
    retriever = BM25Retriever(CORPUS, counter=counter)
    capital, nothing, empty = retriever.search(["capital city", "zzzz qqqq", ""], k=50)
    assert counter.retrieval_calls == 3
    assert set(capital.ids) == {"paris", "tokyo"}  # only passages with a query term; k beyond the corpus is fine
    assert len(nothing) == 0 and len(empty) == 0 and nothing.scores.shape == (0,)
    assert retriever.search([], k=3) == []
    with pytest.raises(ConfigError):
        retriever.search(["x"], k=0)
    with pytest.raises(DataError):
        retriever.search("not a list", k=1)


def test_bm25_index_is_cached_on_disk():
    first = BM25Retriever(CORPUS)
    second = BM25Retriever(CORPUS)
    other = BM25Retriever(CORPUS, k1=1.2)
    assert (first.index_source, second.index_source, other.index_source) == ("built", "disk", "built")
    a, b = first.search(["river Africa"], 3)[0], second.search(["river Africa"], 3)[0]
    assert a.ids == b.ids and np.allclose(a.scores, b.scores)
    assert BM25Retriever(CORPUS, cache=False).index_source == "built"


def test_empty_corpus():
    assert BM25Retriever([]).search(["anything"], k=3)[0].ids == []
    assert DenseRetriever([], HashingEmbedder()).search(["anything"], k=3)[0].ids == []


# ----------------------------------------------------------------------------------------------- dense


def test_pooled_dense_ranks_the_bm25_pool_by_embedding_and_stays_inside_it():
    bm25 = BM25Retriever(CORPUS)
    embedder = HashingEmbedder()
    pooled = PooledDenseRetriever(bm25, embedder, pool=3)
    query = "capital of Japan Tokyo"
    pool_ids = set(bm25.search([query], k=3)[0].ids)
    result = pooled.search([query], k=2)[0]
    assert set(result.ids) <= pool_ids and result.ids[0] == "tokyo"
    full = DenseRetriever(CORPUS, embedder).search([query], k=3)[0]  # same cosine as a full index on the pool
    np.testing.assert_allclose(result.scores[0], full.scores[list(full.ids).index("tokyo")], atol=1e-5)
    assert pooled.counter.retrieval_calls == 1 and bm25.counter.retrieval_calls == 1  # pooling is not counted
    assert len(pooled.search(["zzzz qqqq"], k=2)[0]) == 0  # nothing in the pool, nothing found
    with pytest.raises(ConfigError):
        PooledDenseRetriever(bm25, embedder, pool=0)


@pytest.mark.parametrize("index", ["flat", "ivf", "hnsw"])
def test_dense_finds_the_document_itself(index):
    retriever = DenseRetriever(CORPUS, HashingEmbedder(), index=index, nlist=4, nprobe=4)
    results = retriever.search(list(DOCS.values()), k=3)
    assert [r.ids[0] for r in results] == list(DOCS)
    np.testing.assert_allclose([r.scores[0] for r in results], 1.0, atol=1e-5)
    assert retriever.counter.retrieval_calls == len(DOCS)


def test_dense_k_beyond_corpus_and_index_cache():
    embedder = HashingEmbedder()
    first = DenseRetriever(CORPUS, embedder, index="hnsw")
    assert first.index_source == "built" and embedder.corpus_calls == 1
    second = DenseRetriever(CORPUS, embedder, index="hnsw", ef_search=16)
    assert second.index_source == "disk" and embedder.corpus_calls == 1  # nothing re-embedded, nothing rebuilt
    result = second.search(["capital of Japan"], k=100)[0]
    assert len(result) == len(DOCS) and result.ids[0] == "tokyo"
    assert DenseRetriever(CORPUS, embedder, index="flat").index_source == "built"
    with pytest.raises(ConfigError):
        DenseRetriever(CORPUS, embedder, index="pq")


# ----------------------------------------------------------------------------------------------- hybrid


class StubRetriever(Retriever):
    """Returns fixed (index, score) hits, best first, for every query."""

    def __init__(self, corpus: Corpus, hits: list[tuple[int, float]]) -> None:
        self.corpus, self.counter, self.hits = corpus, CostCounter(), hits

    def _search(self, queries, k):
        idx = np.array([i for i, _ in self.hits[:k]])
        scores = np.array([s for _, s in self.hits[:k]])
        return [RetrievalResult.from_arrays(q, self.corpus, idx, scores) for q in queries]


FIVE = Corpus(("d0", "d1", "d2", "d3", "d4"), ("t0", "t1", "t2", "t3", "t4"))
CHANNEL_A = [(0, 10.0), (1, 6.0), (2, 2.0)]  # min-max: d0 1, d1 .5, d2 0
CHANNEL_B = [(2, 0.9), (0, 0.5), (3, 0.1)]  # min-max: d2 1, d0 .5, d3 0


def _hybrid(**kwargs) -> HybridRetriever:
    return HybridRetriever({"a": StubRetriever(FIVE, CHANNEL_A), "b": StubRetriever(FIVE, CHANNEL_B)}, **kwargs)


def test_normalize_scores():
    np.testing.assert_allclose(normalize_scores(np.array([10.0, 6.0, 2.0]), "minmax"), [1.0, 0.5, 0.0])
    z = math.sqrt(1.5)
    np.testing.assert_allclose(normalize_scores(np.array([0.9, 0.5, 0.1]), "zscore"), [z, 0.0, -z])
    np.testing.assert_allclose(normalize_scores(np.array([3.0, 3.0]), "minmax"), [1.0, 1.0])
    np.testing.assert_allclose(normalize_scores(np.array([3.0, 3.0]), "zscore"), [0.0, 0.0])
    with pytest.raises(ConfigError):
        normalize_scores(np.array([1.0]), "softmax")


def test_weighted_minmax_fusion_matches_hand_computation():
    [result] = _hybrid(weights={"a": 0.7, "b": 0.3}).search(["q"], k=4)
    # d0 = .7*1 + .3*.5, d1 = .7*.5 + .3*0 (missing in b -> b's minimum), d2 = .7*0 + .3*1, d3 = 0 + .3*0
    assert result.ids == ["d0", "d1", "d2", "d3"]
    np.testing.assert_allclose(result.scores, [0.85, 0.35, 0.30, 0.0], atol=1e-6)


def test_per_query_weights_change_the_ranking():
    hybrid = _hybrid()
    first, second = hybrid.search(["q1", "q2"], k=4, weights=[{"a": 0.7, "b": 0.3}, {"a": 0.2, "b": 0.8}])
    assert first.ids == ["d0", "d1", "d2", "d3"]
    assert second.ids == ["d2", "d0", "d1", "d3"]  # d2 = .8, d0 = .2 + .4, d1 = .1, d3 = 0
    np.testing.assert_allclose(second.scores, [0.8, 0.6, 0.1, 0.0], atol=1e-6)
    as_array = hybrid.search(["q1", "q2"], k=4, weights=np.array([[0.7, 0.3], [0.2, 0.8]]))
    assert [r.ids for r in as_array] == [first.ids, second.ids]
    assert hybrid.counter.retrieval_calls == 4
    with pytest.raises(ConfigError):
        hybrid.search(["q1", "q2"], k=4, weights=[{"a": 1.0}])
    with pytest.raises(ConfigError):
        hybrid.search(["q"], k=4, weights={"c": 1.0})
    with pytest.raises(ConfigError):
        hybrid.search(["q"], k=4, weights={"a": -1.0, "b": 2.0})


def test_weighted_zscore_fusion_matches_hand_computation():
    [result] = _hybrid(normalization="zscore").search(["q"], k=4)
    z = math.sqrt(1.5)
    # a: d0 z, d1 0, d2 -z; b: d2 z, d0 0, d3 -z; a missing passage gets the channel's minimum, -z
    assert result.ids == ["d0", "d2", "d1", "d3"]
    np.testing.assert_allclose(result.scores, [z, 0.0, -z, -2 * z], atol=1e-6)


def test_rrf_fusion_matches_hand_computation():
    [result] = _hybrid(fusion="rrf").search(["q"], k=4)
    expected = {"d0": 1 / 61 + 1 / 62, "d2": 1 / 63 + 1 / 61, "d1": 1 / 62, "d3": 1 / 63}
    assert result.ids == list(expected)
    np.testing.assert_allclose(result.scores, list(expected.values()), rtol=1e-6)
    [weighted] = _hybrid(fusion="rrf", rrf_k=10).search(["q"], k=2, weights={"a": 2.0, "b": 1.0})
    assert weighted.ids == ["d0", "d2"]
    np.testing.assert_allclose(weighted.scores, [2 / 11 + 1 / 12, 2 / 13 + 1 / 11], rtol=1e-6)


def test_hybrid_channel_counters_are_not_double_counted_and_bad_configs_fail():
    hybrid = _hybrid()
    hybrid.search(["q"], k=2)
    assert hybrid.counter.retrieval_calls == 1
    assert all(ch.counter.retrieval_calls == 0 for ch in hybrid.channels.values())
    with pytest.raises(ConfigError):
        _hybrid(fusion="max")
    with pytest.raises(ConfigError):
        HybridRetriever({"a": StubRetriever(FIVE, CHANNEL_A), "b": StubRetriever(CORPUS, CHANNEL_B)})


def test_hybrid_of_real_channels_and_empty_results():
    bm25 = BM25Retriever(CORPUS)
    dense = DenseRetriever(CORPUS, HashingEmbedder())
    hybrid = HybridRetriever({"bm25": bm25, "dense": dense}, weights={"bm25": 0.5, "dense": 0.5})
    [hit] = hybrid.search(["Which river flows into the Mediterranean?"], k=3)
    assert hit.ids[0] == "nile" and len(hit) == 3
    empty = HybridRetriever({"a": StubRetriever(FIVE, []), "b": StubRetriever(FIVE, [])})
    assert len(empty.search(["q"], k=3)[0]) == 0
