"""The pieces behind the methods' own chunked views: LangChain-style overlap in the recursive chunker, documents
rebuilt from a corpus however it was chunked, and a view re-chunked with its own ids."""

from __future__ import annotations

import pytest

from workbench.data.chunkers import LANGCHAIN_SEPARATORS, FixedSizeChunker, RecursiveChunker
from workbench.data.corpus import chunked_view, corpus_columns, document_text, rebuilt_documents
from workbench.data.wikiqa import WikiArticle

TEXT = "The quick brown fox jumps over the lazy dog and then runs far away into the forest near the river bank."


def test_recursive_overlap_carries_whole_trailing_words_like_langchain():
    chunks = RecursiveChunker(60, LANGCHAIN_SEPARATORS, overlap=20).chunk(TEXT, "d")
    # packed words up to 60 characters; the next chunk starts with the last words of the previous one that span at
    # most 20 characters ("dog and then runs" = 17) and still leave room for the new word
    assert [c.text for c in chunks] == [
        "The quick brown fox jumps over the lazy dog and then runs",
        "dog and then runs far away into the forest near the river",
        "near the river bank.",
    ]
    assert all(len(c.text) <= 60 for c in chunks)
    assert [(c.start, c.end) for c in chunks] == [(0, 57), (40, 97), (83, 103)]
    # no overlap: plain packing, chunks touch
    plain = RecursiveChunker(60, LANGCHAIN_SEPARATORS).chunk(TEXT, "d")
    assert [c.text for c in plain] == [
        "The quick brown fox jumps over the lazy dog and then runs",
        "far away into the forest near the river bank.",
    ]
    with pytest.raises(ValueError, match="overlap"):
        RecursiveChunker(60, overlap=60)


def test_documents_are_rebuilt_from_any_chunking_and_re_chunked_into_a_view():
    articles = [
        WikiArticle("a", "Alpha", "Alpha one. Alpha two is longer than one. Alpha three closes the summary.", "", "T"),
        WikiArticle("b", "Beta", "Beta is short.", "", "U"),
    ]
    whole = corpus_columns(articles)  # data.chunking: none
    chunked = corpus_columns(articles, FixedSizeChunker(size=20, overlap=6))  # data.chunking: fixed, overlapping
    assert len(chunked["chunk_id"]) > len(whole["chunk_id"])
    expected = [("a", "Alpha", articles[0].extract, "T"), ("b", "Beta", articles[1].extract, "U")]
    assert rebuilt_documents(whole) == expected
    assert rebuilt_documents(chunked) == expected  # overlaps kept once by the start / end offsets
    assert document_text([(1, "two", None, None), (0, "one", None, None)]) == "one two"  # no offsets: spaces
    view = chunked_view(chunked, FixedSizeChunker(size=3, overlap=0, unit="tokens"), "w")
    words = articles[0].extract.split()
    assert view["chunk_id"][:4] == ["a#w0", "a#w1", "a#w2", "a#w3"]  # never the corpus's own "a#0"
    assert view["text"][:4] == [" ".join(words[i : i + 3]) for i in range(0, 12, 3)]
    assert view["index"][:4] == [0, 1, 2, 3] and view["title"][0] == "Alpha" and view["topic"][0] == "T"
    assert view["chunk_id"][-1] == "b#w0" and view["text"][-1] == "Beta is short."
    for i, chunk_id in enumerate(view["chunk_id"]):  # offsets into the rebuilt document
        doc = dict((d, t) for d, _, t, _ in expected)[view["doc_id"][i]]
        assert doc[view["start"][i] : view["end"][i]] == view["text"][i], chunk_id
