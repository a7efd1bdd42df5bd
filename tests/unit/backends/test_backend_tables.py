"""NLI judges and retrievers are tables: a new kind is one entry in backends.factory.JUDGES / RETRIEVERS, and an
unknown kind is one line naming the known ones."""

from __future__ import annotations

import pytest

from workbench.backends import factory
from workbench.core.errors import ConfigError


def test_a_judge_kind_added_to_the_table_is_built_with_the_request(monkeypatch):
    seen = {}

    def build(request):
        seen["request"] = request
        return ("judge", request.embedder())

    monkeypatch.setitem(factory.JUDGES, "exact_match", build)
    judge = factory.build_judge("exact_match", embedder=lambda: "the shared embedder", batch_size=7)
    assert judge == ("judge", "the shared embedder")
    assert seen["request"].kind == "exact_match" and seen["request"].batch_size == 7


def test_an_unknown_judge_names_the_known_ones():
    with pytest.raises(
        ConfigError, match=r"unknown NLI judge 'mnli' \(known: answer_equivalence, cross_encoder, hf, llm\)"
    ):
        factory.build_judge("mnli")


def test_a_retriever_kind_added_to_the_table_is_built_with_corpus_embedder_counter_and_connection(monkeypatch):
    monkeypatch.setitem(factory.RETRIEVERS, "splade", lambda corpus, emb, counter, conn: (corpus, emb(), counter, conn))
    assert factory.build_retriever("splade", "the corpus", embedder=lambda: "emb", counter="c", connection="u") == (
        "the corpus",
        "emb",
        "c",
        "u",
    )


def test_an_unknown_retriever_and_a_dense_one_without_embedder_are_one_line_errors():
    with pytest.raises(
        ConfigError,
        match=r"unknown retriever 'tfidf' \(known: bm25, dense, hybrid, pgvector, milvus, http, lucene,"
        r" elasticsearch, opensearch\)",
    ):
        factory.build_retriever("tfidf", {})
    with pytest.raises(ConfigError, match="the hybrid retriever needs an embedder"):
        factory.build_retriever("hybrid", {"chunk_id": ["a"], "text": ["some words"]})
    with pytest.raises(ConfigError, match=r"an external retrieval backend needs retrieval\.connection"):
        factory.build_retriever("pgvector", {"chunk_id": ["a"], "text": ["some words"]})
