"""The passage table an external retriever shares with its consumers, and the hit contract of
:class:`~workbench.backends.retrieval_engines.ExternalRetriever`: ``(id, score)`` or ``(id, score, fields)``; an id
the corpus lacks is appended with the engine's text, and refused in one line when the engine gave none."""

from __future__ import annotations

import pytest

from tests.toy_corpus import corpus_dataset
from workbench.backends.passage_table import PassageTable, passages_of
from workbench.backends.retrieval_engines import Connection, EngineError, ExternalRetriever
from workbench.core.errors import DataError


class _Canned(ExternalRetriever):
    """An external retriever whose engine answers every query with ``hits`` (the base class's contract only)."""

    def __init__(self, passages, hits) -> None:
        super().__init__(passages, Connection("postgresql://u:pw@db/x", "t", channel="lexical"))
        self.hits = hits

    def _search_one(self, query, vector, k):
        return self.hits[:k]


def test_a_table_keeps_the_corpus_rows_and_appends_new_passages_once():
    table = PassageTable.of(corpus_dataset())
    title_column = table["title"]
    assert len(table) == 6 and table.row("d2#0") == 2 and table.row("zz#1") is None
    row = table.add("zz#1", "Some text.", title="Zed")
    assert row == 6 and table.add("zz#1", "other") == 6 and len(table) == 7
    assert title_column[6] == "Zed" and table["doc_id"][6] == "zz" and table["index"][6] == 0  # the live column
    empty = PassageTable.of(None)
    assert len(empty) == 0 and set(empty.column_names) >= {"chunk_id", "doc_id", "title", "text", "index"}
    with pytest.raises(DataError, match="unique"):
        PassageTable({"chunk_id": ["a", "a"], "text": ["x", "y"]})
    with pytest.raises(DataError, match="missing column"):
        PassageTable.of({"id": ["a"], "text": ["x"]})


def test_hits_outside_the_corpus_with_their_text_become_rows():
    hits = [
        ("d1#0", 2.0),
        ("ext#3", 1.5, {"text": "An outside passage.", "title": "Out", "doc_id": "ext"}),
        ("d0#0", 1.0, {}),
    ]
    engine = _Canned(corpus_dataset(), hits)
    (result,) = engine.search(["q"], k=3)
    assert result.ids == ["d1#0", "ext#3", "d0#0"] and list(result.indices) == [1, 6, 0]
    assert engine.passages["text"][6] == "An outside passage." and engine.passages["title"][6] == "Out"
    assert passages_of(engine, "corpus") is engine.passages and passages_of(object(), "corpus") == "corpus"
    (again,) = engine.search(["q"], k=3)
    assert list(again.indices) == [1, 6, 0] and len(engine.passages) == 7  # appended once


def test_an_id_outside_the_corpus_without_text_is_one_line():
    engine = _Canned(corpus_dataset(), [("d1#0", 2.0), ("ext#3", 1.5, {"title": "no text"})])
    with pytest.raises(EngineError) as caught:
        engine.search(["q"], k=2)
    message = str(caught.value)
    assert "returned 1 id(s) the run's corpus does not hold, without their text" in message
    assert "postgresql://u:***@db/x (t)" in message and "pw" not in message and "\n" not in message


OUTSIDE = [("d1#0", 2.0), ("ext#0", 1.5, {"text": "An outside passage.", "title": "Out", "doc_id": "ext"})]


def test_the_stages_read_an_outside_passage_by_its_row():
    """collect's passages and answer's rag contexts read titles and texts after the search, from the table."""
    from types import SimpleNamespace

    from workbench.stages.answer.run import mode_contexts
    from workbench.stages.collect.run import _Passages

    engine = _Canned(corpus_dataset(), OUTSIDE)
    config = SimpleNamespace(
        retrieval=SimpleNamespace(k=2),
        answer=SimpleNamespace(passage_chars=400),
        collect=SimpleNamespace(passage_chars=400),
    )
    ctx = SimpleNamespace(config=config, resources=SimpleNamespace(retriever=lambda corpus: engine))
    contexts, retrieved = mode_contexts(ctx, "rag", [{"question": "q"}], corpus_dataset())
    assert retrieved == [["d1#0", "ext#0"]] and "Out" in contexts[0] and "An outside passage." in contexts[0]
    chunks, ids = _Passages(ctx, corpus_dataset()).top_k(["q"])
    assert ids == [["d1#0", "ext#0"]] and "An outside passage." in chunks[0][1] and "Lyon" in chunks[0][0]


def test_dense_rag_rebuilds_an_outside_document_from_the_rows_the_engine_added():
    from workbench.methods.base import Tools
    from workbench.methods.dense_rag.chunking import ContextChunker

    engine = _Canned(corpus_dataset(), OUTSIDE)
    tools = Tools(generator=None, retriever=engine, corpus=corpus_dataset(), counter=engine.counter)
    chunker = ContextChunker(tools, settings=None)
    assert chunker.document("d1") == corpus_dataset()["text"][1] and chunker.document("ext") == ""
    (hits,) = tools.search(["q"], k=2)
    assert hits[1].text == "An outside passage." and hits[1].doc_id == "ext" and hits[1].index == 6
    assert chunker.document("ext") == "An outside passage."  # the document index took the new row in
