"""Passage corpora built from articles, and their link to wiki-qa gold passages."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.unit.data import fake_articles
from workbench.core.errors import DataError
from workbench.data.chunkers import ChunkIndex, FixedSizeChunker, SemanticChunker
from workbench.data.corpus import (
    build_corpus,
    corpus_chunks,
    corpus_columns,
    corpus_documents,
    corpus_features,
    corpus_fingerprint,
)
from workbench.data.wikiqa import WikiArticle, build_wikiqa


def test_default_corpus_is_one_chunk_per_summary() -> None:
    articles = fake_articles()
    corpus = build_corpus(articles)
    assert corpus.features == corpus_features()
    assert corpus.num_rows == len(articles)
    assert corpus["chunk_id"] == [f"{a.doc_id}#0" for a in articles]
    first = corpus[0]
    assert (first["doc_id"], first["title"], first["topic"], first["index"]) == ("Paris", "Paris", "Places", 0)
    assert first["text"] == articles[0].extract and (first["start"], first["end"]) == (0, len(articles[0].extract))


def test_gold_passages_are_found_in_corpus() -> None:
    articles = fake_articles()
    corpus_docs = dict(zip(build_corpus(articles)["doc_id"], build_corpus(articles)["text"], strict=True))
    dd = build_wikiqa(articles, seed=0)
    passages = [p for split in dd for row in dd[split] for p in row["gold_passages"]]
    assert passages
    for passage in passages:
        assert corpus_docs[passage["doc_id"]] == passage["text"]


def test_chunked_corpus_keeps_offsets_and_order() -> None:
    articles = fake_articles()[:3]
    corpus = build_corpus(articles, chunker=FixedSizeChunker(size=80, overlap=20))
    extracts = {a.doc_id: a.extract for a in articles}
    for row in corpus:
        assert extracts[row["doc_id"]][row["start"] : row["end"]] == row["text"]
        assert row["chunk_id"] == f"{row['doc_id']}#{row['index']}"
    paris = [row["index"] for row in corpus if row["doc_id"] == "Paris"]
    assert paris == list(range(len(paris))) and len(paris) > 2
    index = ChunkIndex(corpus_chunks(corpus))
    assert index.neighbours("Paris#1")[0].chunk_id == "Paris#0"


def test_semantic_chunker_in_corpus_uses_one_embedding_call() -> None:
    calls = []

    def embed(sentences: list[str]) -> np.ndarray:
        calls.append(len(sentences))
        return np.tile([1.0, 0.0], (len(sentences), 1))  # everything similar: merge up to max_len

    articles = fake_articles()[:4]
    corpus = build_corpus(articles, chunker=SemanticChunker(embed, tau=0.5, max_len=10_000))
    assert len(calls) == 1
    assert corpus["text"] == [a.extract for a in articles]


def test_fingerprint_tracks_content_and_duplicates_rejected() -> None:
    articles = fake_articles()
    base = corpus_fingerprint(build_corpus(articles))
    assert corpus_fingerprint(build_corpus(fake_articles())) == base
    changed = [*articles[:-1], WikiArticle(articles[-1].doc_id, articles[-1].title, "Changed text.", "", "History")]
    assert corpus_fingerprint(build_corpus(changed)) != base
    with pytest.raises(ValueError, match="duplicate doc_id 'Paris'"):
        build_corpus([articles[0], articles[0]])


def test_plain_columns_equal_the_dataset_and_share_its_fingerprint() -> None:
    articles = fake_articles()[:4]
    chunker = FixedSizeChunker(size=80, overlap=20)
    columns = corpus_columns(articles, chunker)
    dataset = build_corpus(articles, chunker=chunker)
    assert columns == dataset.to_dict()  # the runtime's corpus (no datasets import) is the stages' corpus
    assert corpus_fingerprint(columns) == corpus_fingerprint(dataset)


# ------------------------------------------------------------------------------------------ a user's corpus file
def test_a_duplicate_doc_id_in_a_corpus_file_names_the_id_the_rows_and_the_file(tmp_path) -> None:
    rows = [
        {"doc_id": "d1", "title": "A", "text": "One."},
        {"doc_id": "d2", "title": "B", "text": "Two."},
        {"doc_id": "d1", "title": "C", "text": "Three."},
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError) as err:
        corpus_documents(str(path))
    assert str(err.value) == f"{path}: rows 1 and 3 have the same doc_id 'd1': each document needs its own id"
    long_id = "x" * 5000
    path.write_text("".join(json.dumps({"doc_id": long_id, "title": "T", "text": "t"}) + "\n" for _ in range(2)))
    with pytest.raises(DataError) as err:
        corpus_documents(str(path))
    assert len(str(err.value)) < len(str(path)) + 200 and "…" in str(err.value)  # the id is cut, not echoed whole


def test_a_duplicate_doc_id_is_one_line_from_the_cli(tmp_path) -> None:
    (tmp_path / "qa.jsonl").write_text(json.dumps({"id": "q0", "question": "Who?", "answers": ["Me"]}) + "\n")
    rows = [{"doc_id": "d", "title": "D", "text": "Me."}, {"doc_id": "d", "title": "E", "text": "You."}]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = tmp_path / "local.yaml"
    recipe.write_text(
        "name: local\nstages: [build_data]\ntracker: none\n"
        f"data: {{dataset: {tmp_path}/qa.jsonl, corpus: {tmp_path}/corpus.jsonl, fractions: [0, 0, 0, 1]}}\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "workbench", "-q", "run", str(recipe), f"run_dir={tmp_path}/run"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert (
        lines[0]
        == f"error: {tmp_path}/corpus.jsonl: rows 1 and 2 have the same doc_id 'd': each document needs its own id"
    )
    assert not (tmp_path / "run" / "stages" / "build_data").exists()
