"""Real MiniLM embeddings and BM25 / dense / hybrid retrieval over 300 real Wikipedia summaries: an article's own
first sentence must retrieve that article at rank 1."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.backends.embedder import Embedder
from workbench.backends.retrievers import BM25Retriever, DenseRetriever, HybridRetriever, as_corpus
from workbench.data.nli_pairs import pair_sentences
from workbench.data.wikiqa import load_articles

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cache_env(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("WORKBENCH_CACHE_DIR", str(tmp_path_factory.mktemp("wb-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def articles():
    every = sorted(load_articles(), key=lambda a: a.doc_id)
    step = len(every) // 300
    return every[::step][:300]  # spread over the alphabet, deterministic


@pytest.fixture(scope="module")
def embedder(cache_env, minilm_dir):
    return Embedder("minilm")


def test_minilm_embeddings(embedder):
    vectors = embedder.encode(["The capital of France is Paris.", "Paris is France's capital city.", "Photosynthesis"])
    assert vectors.shape == (3, 384) and embedder.dim == 384
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > 0.8 > vectors[0] @ vectors[2]
    again = embedder.encode(["The capital of France is Paris."])
    assert embedder.counter.cache_hits == 1
    np.testing.assert_array_equal(again[0], vectors[0])


def test_first_sentence_retrieves_its_article(embedder, articles):
    corpus = as_corpus([{"chunk_id": a.doc_id, "text": " ".join(a.extract.split())} for a in articles])
    assert len(corpus) == 300
    queries, keys = [], []
    for article in articles[::6]:  # 50 queries
        queries.append(pair_sentences(article.extract)[0])
        keys.append(article.doc_id)
    bm25 = BM25Retriever(corpus)
    dense = DenseRetriever(corpus, embedder)
    hybrid = HybridRetriever({"bm25": bm25, "dense": dense}, fusion="rrf")
    for retriever in (bm25, dense, hybrid):
        results = retriever.search(queries, k=5)
        top1 = [r.ids[0] if len(r) else None for r in results]
        hits = sum(t == k for t, k in zip(top1, keys, strict=True))
        assert hits == len(keys), (
            type(retriever).__name__,
            [(k, t) for t, k in zip(top1, keys, strict=True) if t != k],
        )
    # the dense index and the corpus embeddings are reused from disk
    assert DenseRetriever(corpus, embedder).index_source == "disk"
