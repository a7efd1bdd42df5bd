"""Chunkers and sentence splitting, checked against hand-computed chunks."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.data.chunkers import (
    Chunk,
    ChunkIndex,
    FixedSizeChunker,
    RecursiveChunker,
    SemanticChunker,
    chunk_documents,
    sentence_spans,
    split_sentences,
)


def _texts(chunks: list[Chunk]) -> list[str]:
    return [c.text for c in chunks]


def _check_offsets(chunks: list[Chunk], text: str, doc_id: str) -> None:
    for i, chunk in enumerate(chunks):
        assert chunk.text == text[chunk.start : chunk.end]
        assert chunk.index == i and chunk.doc_id == doc_id and chunk.chunk_id == f"{doc_id}#{i}"


# ------------------------------------------------------------------------------------------ sentences


def test_split_sentences_keeps_abbreviations_initials_and_decimals() -> None:
    text = (
        "Dr. Smith met Arthur C. Clarke in the U.S. in 1968. The film cost $10.5 million, e.g. more than planned! "
        'Was it worth it? "Yes," he said.\nA new line starts here'
    )
    assert split_sentences(text) == [
        "Dr. Smith met Arthur C. Clarke in the U.S. in 1968.",
        "The film cost $10.5 million, e.g. more than planned!",
        "Was it worth it?",
        '"Yes," he said.',
        "A new line starts here",
    ]


def test_sentence_spans_are_offsets() -> None:
    text = "  One sentence.  Two sentences here.   "
    spans = sentence_spans(text)
    assert spans == [(2, 15), (17, 36)]
    assert [text[s:e] for s, e in spans] == ["One sentence.", "Two sentences here."]
    assert split_sentences("") == [] and split_sentences("   ") == []


def test_lowercase_after_period_does_not_split() -> None:
    assert split_sentences("It is approx. ten metres. Next one.") == ["It is approx. ten metres.", "Next one."]
    assert split_sentences("See fig. 3 for details.") == ["See fig. 3 for details."]


# ------------------------------------------------------------------------------------------ fixed size


def test_fixed_size_chars_windows_with_overlap() -> None:
    chunks = FixedSizeChunker(size=4, overlap=1).chunk("abcdefghij", "d")
    assert _texts(chunks) == ["abcd", "defg", "ghij"]
    assert [(c.start, c.end) for c in chunks] == [(0, 4), (3, 7), (6, 10)]
    _check_offsets(chunks, "abcdefghij", "d")
    assert _texts(FixedSizeChunker(size=4, overlap=0).chunk("abcdefghij", "d")) == ["abcd", "efgh", "ij"]
    assert FixedSizeChunker(size=4, overlap=1).chunk("", "d") == []


def test_fixed_size_tokens_default_whitespace_tokens() -> None:
    text = "a b c d e f g"
    chunks = FixedSizeChunker(size=3, overlap=1, unit="tokens").chunk(text, "t")
    assert _texts(chunks) == ["a b c", "c d e", "e f g"]
    _check_offsets(chunks, text, "t")


def test_fixed_size_tokens_with_span_tokenizer() -> None:
    def two_char_tokens(text: str) -> list[tuple[int, int]]:
        return [(i, min(i + 2, len(text))) for i in range(0, len(text), 2)]

    chunks = FixedSizeChunker(size=2, overlap=0, unit="tokens", tokenizer=two_char_tokens).chunk("abcdefghi", "x")
    assert _texts(chunks) == ["abcd", "efgh", "i"]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"size": 0}, "size"),
        ({"size": 10, "overlap": 10}, "overlap"),
        ({"size": 10, "overlap": -1}, "overlap"),
        ({"unit": "words"}, "unit"),
        ({"tokenizer": str.split}, "tokenizer"),
    ],
)
def test_fixed_size_validates_parameters(kwargs, name) -> None:
    with pytest.raises(ValueError, match=name):
        FixedSizeChunker(**kwargs)


# ------------------------------------------------------------------------------------------ recursive


def test_recursive_prefers_coarse_separators() -> None:
    text = "Para one is here.\n\nPara two is a bit longer. It has two sentences."
    chunks = RecursiveChunker(max_chars=30).chunk(text, "r")
    assert _texts(chunks) == ["Para one is here.", "Para two is a bit longer.", "It has two sentences."]
    _check_offsets(chunks, text, "r")


def test_recursive_packs_small_pieces_and_hard_splits() -> None:
    assert _texts(RecursiveChunker(max_chars=10).chunk("One. Two. Three. Four.", "r")) == [
        "One. Two.",
        "Three.",
        "Four.",
    ]
    assert _texts(RecursiveChunker(max_chars=5).chunk("abcdefghijkl", "r")) == ["abcde", "fghij", "kl"]
    whole = "Short text."
    assert RecursiveChunker(max_chars=100).chunk(whole, "r") == [Chunk("r#0", "r", 0, whole, 0, len(whole))]


def test_recursive_validates_parameters() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        RecursiveChunker(max_chars=0)
    with pytest.raises(ValueError, match="separators"):
        RecursiveChunker(separators=("\n", ""))
    with pytest.raises(ValueError, match="separators"):
        RecursiveChunker(separators="\n")


# ------------------------------------------------------------------------------------------ semantic


SENTENCES = {
    "Cats purr.": [1.0, 0.0],
    "Cats nap.": [0.8, 0.6],  # cos with previous = 0.8
    "Stocks fell.": [0.0, 1.0],  # cos with previous = 0.6
    "Bonds rose.": [0.6, 0.8],  # cos with previous = 0.8
}
DOC = "Cats purr. Cats nap. Stocks fell. Bonds rose."


class FakeEmbedder:
    """Looks sentences up in a table of unit vectors; counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, sentences: list[str]) -> np.ndarray:
        self.calls += 1
        return np.array([SENTENCES[s] for s in sentences], dtype=np.float32)


def test_semantic_merges_neighbours_above_tau() -> None:
    chunks = SemanticChunker(FakeEmbedder(), tau=0.7, max_len=512).chunk(DOC, "s")
    assert _texts(chunks) == ["Cats purr. Cats nap.", "Stocks fell. Bonds rose."]  # 0.8 merges, 0.6 splits
    _check_offsets(chunks, DOC, "s")
    assert _texts(SemanticChunker(FakeEmbedder(), tau=0.5).chunk(DOC, "s")) == [DOC]
    assert _texts(SemanticChunker(FakeEmbedder(), tau=0.9).chunk(DOC, "s")) == list(SENTENCES)


def test_semantic_merge_test_is_strict() -> None:
    def orthogonal(sentences: list[str]) -> np.ndarray:
        return np.array([[1.0, 0.0], [0.0, 1.0]])[: len(sentences)]

    text = "First one. Second one."
    # cosine exactly 0: tau = 0 does not merge (cos > tau, spec seed-000 §6.4), a lower tau does
    assert _texts(SemanticChunker(orthogonal, tau=0.0).chunk(text, "o")) == ["First one.", "Second one."]
    assert _texts(SemanticChunker(orthogonal, tau=-0.01).chunk(text, "o")) == [text]


def test_semantic_respects_max_len_without_counting_spaces() -> None:
    # all neighbours similar; 10 + 9 = 19 <= 19 merges, 19 + 12 > 19 does not
    chunks = SemanticChunker(FakeEmbedder(), tau=-1.0, max_len=19).chunk(DOC, "s")
    assert _texts(chunks) == ["Cats purr. Cats nap.", "Stocks fell.", "Bonds rose."]
    # a sentence longer than max_len stays whole, as its own chunk
    assert _texts(SemanticChunker(FakeEmbedder(), tau=-1.0, max_len=5).chunk(DOC, "s")) == list(SENTENCES)


def test_semantic_embeds_all_documents_in_one_call() -> None:
    embedder = FakeEmbedder()
    documents = [("a", DOC), ("b", "Bonds rose. Cats nap."), ("c", "")]
    chunks = chunk_documents(SemanticChunker(embedder, tau=0.7), documents)
    assert embedder.calls == 1
    # document b: cos([0.6, 0.8], [0.8, 0.6]) = 0.96 > 0.7, one chunk; the empty document c has none
    assert [(c.chunk_id, c.text) for c in chunks] == [
        ("a#0", "Cats purr. Cats nap."),
        ("a#1", "Stocks fell. Bonds rose."),
        ("b#0", "Bonds rose. Cats nap."),
    ]


def test_semantic_validates_parameters_and_embeddings() -> None:
    with pytest.raises(ValueError, match="tau"):
        SemanticChunker(FakeEmbedder(), tau=1.5)
    with pytest.raises(ValueError, match="max_len"):
        SemanticChunker(FakeEmbedder(), max_len=0)
    with pytest.raises(ValueError, match="embed_fn"):
        SemanticChunker("not callable")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="embed_fn returned shape"):
        SemanticChunker(lambda s: np.ones((1, 2)), tau=0.5).chunk(DOC, "s")


# ------------------------------------------------------------------------------------------ index


def test_chunk_index_neighbours_stay_in_document() -> None:
    chunks = FixedSizeChunker(size=4, overlap=0).chunk("aaaabbbbcccc", "x") + FixedSizeChunker(4, 0).chunk(
        "ddddeeee", "y"
    )
    index = ChunkIndex(chunks)
    assert len(index) == 5 and "x#1" in index and "z#0" not in index
    assert index.get("x#1").text == "bbbb"
    prev, nxt = index.neighbours("x#1")
    assert prev is not None and nxt is not None and (prev.text, nxt.text) == ("aaaa", "cccc")
    assert index.neighbours("x#0")[0] is None
    assert index.neighbours("x#2")[1] is None  # does not run into document y
    assert index.neighbours("y#0") == (None, index.get("y#1"))
    assert [c.chunk_id for c in index.document("x")] == ["x#0", "x#1", "x#2"]
    with pytest.raises(KeyError, match="x#9"):
        index.get("x#9")
    with pytest.raises(ValueError, match="duplicate chunk_id"):
        ChunkIndex(chunks + chunks[:1])
