"""Splitting documents into retrievable chunks, with exact character offsets.

Every chunker returns :class:`Chunk` objects whose ``text`` equals ``document[start:end]``, numbered 0, 1, ...
within their document, with ``chunk_id = f"{doc_id}#{index}"``. Chunkers:

* :class:`FixedSizeChunker` — sliding windows of ``size`` characters or tokens with ``overlap``;
* :class:`RecursiveChunker` — split on the coarsest separator that fits, then pack pieces up to ``max_chars``;
* :class:`SemanticChunker` — DENSE-RAG's adaptive semantic chunking (spec seed-000 §6.3–6.4): neighbouring
  sentences are merged while their embeddings' cosine similarity is above ``tau`` and the chunk stays within
  ``max_len`` characters.

:class:`ChunkIndex` looks chunks up by id and finds a chunk's neighbours in its document (InSemRAG's chunk repair).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

Span = tuple[int, int]


@dataclass(frozen=True)
class Chunk:
    """A piece of one document: ``text == document[start:end]``; ``index`` is its position in the document."""

    chunk_id: str
    doc_id: str
    index: int
    text: str
    start: int
    end: int


def make_chunk_id(doc_id: str, index: int) -> str:
    """The id of chunk ``index`` of document ``doc_id`` (``"<doc_id>#<index>"``)."""
    return f"{doc_id}#{index}"


def spans_to_chunks(text: str, doc_id: str, spans: Iterable[Span]) -> list[Chunk]:
    """Chunks for the character ``spans`` of ``text``, trimmed of surrounding white space; empty spans are dropped."""
    chunks: list[Chunk] = []
    for start, end in spans:
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if end > start:
            index = len(chunks)
            chunks.append(Chunk(make_chunk_id(doc_id, index), doc_id, index, text[start:end], start, end))
    return chunks


class Chunker(Protocol):
    """Anything that splits one document into chunks."""

    def chunk(self, text: str, doc_id: str) -> list[Chunk]:
        """The chunks of ``text`` (document ``doc_id``), in order."""
        ...


def chunk_documents(chunker: Chunker, documents: Iterable[tuple[str, str]]) -> list[Chunk]:
    """Chunk every ``(doc_id, text)`` pair; chunkers with a batched ``chunk_many`` use it (one embedding call)."""
    documents = list(documents)
    many = getattr(chunker, "chunk_many", None)
    if callable(many):
        return many(documents)
    return [chunk for doc_id, text in documents for chunk in chunker.chunk(text, doc_id)]


# --------------------------------------------------------------------------------------------- sentences

_ABBREVIATION_WORDS = (
    "mr mrs ms dr prof sr jr st mt ft vs etc al cf approx ca co corp inc ltd no nos vol fig figs eq eqs "
    "gen col lt sgt capt cmdr adm gov rev hon pres sen rep dept univ est jan feb mar apr jun jul aug sep sept "
    "oct nov dec e.g i.e a.m p.m u.s u.k u.n b.c a.d ph.d"
)
_ABBREVIATIONS = frozenset(_ABBREVIATION_WORDS.split())
# A boundary candidate: sentence-final punctuation, optional closing quotes/brackets, then white space.
_BOUNDARY = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s)")
_NEXT_START = re.compile(r"\s+[\"'“‘(\[]*[A-Z0-9]")
_WORD_BEFORE = re.compile(r"([A-Za-z][A-Za-z.]*)\.$")


def _is_abbreviation(text: str, dot: int) -> bool:
    """True when the period at ``text[dot]`` ends an abbreviation or an initial rather than a sentence."""
    match = _WORD_BEFORE.search(text, max(0, dot - 40), dot + 1)
    if match is None:
        return False
    word = match.group(1)
    if len(word) == 1 and word.isupper():  # an initial: "Arthur C. Clarke"
        return True
    if "." in word:  # "U.S.", "e.g.", "Ph.D."
        return True
    return word.lower() in _ABBREVIATIONS


def sentence_spans(text: str) -> list[Span]:
    """Character spans of the sentences of ``text`` (white space between them excluded).

    A sentence ends at ``.``, ``!`` or ``?`` (plus closing quotes/brackets) followed by white space and a
    capital letter, digit or opening quote; a period after a common abbreviation (``Dr.``, ``e.g.``), an
    initial (``C.``) or inside a number (``3.14``) does not end one. Line breaks always end a sentence.
    """
    spans: list[Span] = []
    for line in re.finditer(r"[^\n]+", text):
        start = line.start()
        for match in _BOUNDARY.finditer(text, line.start(), line.end()):
            end = match.end()
            if not _NEXT_START.match(text, end, line.end()):
                continue
            if text[match.start()] == "." and match.end() - match.start() == 1 and _is_abbreviation(text, end - 1):
                continue
            spans.append((start, end))
            start = end
        spans.append((start, line.end()))
    return [s for s in (_strip_span(text, span) for span in spans) if s[1] > s[0]]


def _strip_span(text: str, span: Span) -> Span:
    start, end = span
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (see :func:`sentence_spans` for the rules), stripped, in order."""
    return [text[start:end] for start, end in sentence_spans(text)]


# --------------------------------------------------------------------------------------------- fixed size


def _whitespace_token_spans(text: str) -> list[Span]:
    return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def _tokenizer_spans(tokenizer: Any, text: str) -> list[Span]:
    """Token character spans from a callable ``text -> spans`` or a Hugging Face fast tokenizer."""
    if hasattr(tokenizer, "backend_tokenizer") or hasattr(tokenizer, "is_fast"):
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return [(int(s), int(e)) for s, e in encoded["offset_mapping"] if e > s]
    return [(int(s), int(e)) for s, e in tokenizer(text)]


def _window_starts(n: int, size: int, step: int) -> list[int]:
    """Window starts over ``n`` units: every ``step``, stopping once a window reaches the end."""
    starts = [0]
    while starts[-1] + size < n:
        starts.append(starts[-1] + step)
    return starts


class FixedSizeChunker:
    """Sliding windows of ``size`` units with ``overlap`` units shared by neighbouring windows.

    ``unit="chars"`` counts characters. ``unit="tokens"`` counts tokens: ``tokenizer`` is a Hugging Face fast
    tokenizer (offsets are used) or a callable ``text -> [(start, end), ...]``; without one, white-space
    separated words are the tokens. The last window ends at the end of the document; chunks are trimmed of
    surrounding white space.
    """

    def __init__(self, size: int = 512, overlap: int = 64, unit: str = "chars", tokenizer: Any = None) -> None:
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"size must be a positive integer, got {size!r}")
        if not isinstance(overlap, int) or not 0 <= overlap < size:
            raise ValueError(f"overlap must be an integer with 0 <= overlap < size ({size}), got {overlap!r}")
        if unit not in ("chars", "tokens"):
            raise ValueError(f"unit must be 'chars' or 'tokens', got {unit!r}")
        if tokenizer is not None and unit != "tokens":
            raise ValueError("tokenizer is only used with unit='tokens'")
        if tokenizer is not None and not callable(tokenizer):
            raise ValueError("tokenizer must be callable (a fast tokenizer or text -> token spans)")
        self.size, self.overlap, self.unit, self.tokenizer = size, overlap, unit, tokenizer

    def chunk(self, text: str, doc_id: str) -> list[Chunk]:
        """The windows of ``text`` as chunks of document ``doc_id``."""
        step = self.size - self.overlap
        if self.unit == "chars":
            spans = [(s, min(s + self.size, len(text))) for s in _window_starts(len(text), self.size, step)]
            return spans_to_chunks(text, doc_id, spans)
        tokens = _tokenizer_spans(self.tokenizer, text) if self.tokenizer else _whitespace_token_spans(text)
        if not tokens:
            return []
        starts = _window_starts(len(tokens), self.size, step)
        spans = [(tokens[s][0], tokens[min(s + self.size, len(tokens)) - 1][1]) for s in starts]
        return spans_to_chunks(text, doc_id, spans)


# --------------------------------------------------------------------------------------------- recursive


LANGCHAIN_SEPARATORS = ("\n\n", "\n", " ")
"""The separators of LangChain's ``RecursiveCharacterTextSplitter`` (its final ``""`` is the per-character cut that
:class:`RecursiveChunker` makes when no separator is left)."""


class RecursiveChunker:
    """Recursive splitting: pieces of at most ``max_chars`` characters, cut at the coarsest separator possible.

    The text is cut after each occurrence of the first separator it contains (the separator stays with the piece
    before it); neighbouring pieces are packed greedily while they fit in ``max_chars``; a piece still too long
    is cut with the next separator, and with no separator left it is cut every ``max_chars`` characters.

    ``overlap`` (characters, default 0) carries trailing pieces of a chunk into the next one, as LangChain's
    ``RecursiveCharacterTextSplitter(chunk_size, chunk_overlap)`` does: when a piece no longer fits, the chunk is
    closed and the next one starts with the longest run of the closed chunk's last pieces that spans at most
    ``overlap`` characters and leaves room for the new piece. Pieces are whole (words, with ``" "`` as the finest
    separator; the last part of a piece that had to be cut further counts as one piece), so the overlap is at most
    ``overlap`` characters, possibly less. DENSE-RAG's fixed chunks (spec seed-000 §6.1: 512 / 64 characters,
    LangChain's separators :data:`LANGCHAIN_SEPARATORS`) use it. ``overlap = 0`` packs exactly as without it.
    """

    def __init__(
        self, max_chars: int = 512, separators: Sequence[str] = ("\n\n", "\n", ". ", " "), overlap: int = 0
    ) -> None:
        if not isinstance(max_chars, int) or max_chars <= 0:
            raise ValueError(f"max_chars must be a positive integer, got {max_chars!r}")
        if isinstance(separators, str) or not all(isinstance(s, str) and s for s in separators):
            raise ValueError(f"separators must be a sequence of non-empty strings, got {separators!r}")
        if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < max_chars:
            raise ValueError(f"overlap must be an integer with 0 <= overlap < max_chars ({max_chars}), got {overlap!r}")
        self.max_chars = max_chars
        self.separators = tuple(separators)
        self.overlap = overlap

    def chunk(self, text: str, doc_id: str) -> list[Chunk]:
        """The recursive split of ``text`` as chunks of document ``doc_id``."""
        return spans_to_chunks(text, doc_id, self._split(text, 0, len(text), 0))

    def _split(self, text: str, start: int, end: int, level: int) -> list[Span]:
        if end - start <= self.max_chars:
            return [(start, end)]
        separator = next((s for s in self.separators[level:] if s in text[start:end]), None)
        if separator is None:
            return [(s, min(s + self.max_chars, end)) for s in range(start, end, self.max_chars)]
        level = self.separators.index(separator)
        spans: list[Span] = []
        current: list[Span] = []  # the pieces of the chunk being packed (contiguous)
        for piece_start, piece_end in _cut_after(text, start, end, separator):
            if piece_end - piece_start > self.max_chars:
                if current:
                    spans.append((current[0][0], current[-1][1]))
                spans.extend(self._split(text, piece_start, piece_end, level + 1))
                current = [spans.pop()]  # its last part may still take the pieces that follow
                continue
            if current and piece_end - current[0][0] > self.max_chars:
                spans.append((current[0][0], current[-1][1]))
                while current and (
                    current[-1][1] - current[0][0] > self.overlap or piece_end - current[0][0] > self.max_chars
                ):
                    current.pop(0)
            current.append((piece_start, piece_end))
        if current:
            spans.append((current[0][0], current[-1][1]))
        return spans


def _cut_after(text: str, start: int, end: int, separator: str) -> list[Span]:
    """Spans of ``text[start:end]`` cut right after each occurrence of ``separator``."""
    pieces: list[Span] = []
    position = start
    while (found := text.find(separator, position, end)) != -1:
        pieces.append((position, found + len(separator)))
        position = found + len(separator)
    if position < end:
        pieces.append((position, end))
    return pieces


# --------------------------------------------------------------------------------------------- semantic

EmbedFn = Callable[[list[str]], np.ndarray]


class SemanticChunker:
    """DENSE-RAG adaptive semantic chunking (spec seed-000 §6.3–6.4, Alg 2).

    Each document is split into sentences (:func:`sentence_spans`) and every sentence is embedded with
    ``embed_fn`` (``list[str] -> array (n, d)`` of L2-normalised rows; rows are re-normalised defensively).
    Sentence i+1 joins the current chunk when ``cos(e_i, e_{i+1}) > tau`` (strict, as in Alg 2) **and** the
    chunk's summed sentence length plus ``len(s_{i+1})`` is at most ``max_len`` characters (joining white space
    is not counted, as in the reference code); otherwise it starts a new chunk. Consecutive *sentences* are
    compared, not chunk and sentence. A sentence longer than ``max_len`` is its own chunk and is not split.
    Chunks do not overlap; a chunk's text is the document slice from its first to its last sentence.
    """

    def __init__(self, embed_fn: EmbedFn, tau: float = 0.6, max_len: int = 512) -> None:
        if not callable(embed_fn):
            raise ValueError("embed_fn must be callable: list[str] -> np.ndarray of L2-normalised rows")
        if isinstance(tau, bool) or not isinstance(tau, int | float) or not -1.0 <= float(tau) <= 1.0:
            raise ValueError(f"tau must be a number in [-1, 1], got {tau!r}")
        if not isinstance(max_len, int) or max_len <= 0:
            raise ValueError(f"max_len must be a positive integer, got {max_len!r}")
        self.embed_fn, self.tau, self.max_len = embed_fn, float(tau), max_len

    def chunk(self, text: str, doc_id: str) -> list[Chunk]:
        """The semantic chunks of one document."""
        return self.chunk_many([(doc_id, text)])

    def chunk_many(self, documents: Sequence[tuple[str, str]]) -> list[Chunk]:
        """Chunk several ``(doc_id, text)`` documents with a single ``embed_fn`` call over all their sentences."""
        spans = [sentence_spans(text) for _, text in documents]
        sentences = [text[s:e] for (_, text), doc_spans in zip(documents, spans, strict=True) for s, e in doc_spans]
        embeddings = self._embed(sentences)
        chunks: list[Chunk] = []
        offset = 0
        for (doc_id, text), doc_spans in zip(documents, spans, strict=True):
            doc_embeddings = embeddings[offset : offset + len(doc_spans)]
            offset += len(doc_spans)
            chunks.extend(spans_to_chunks(text, doc_id, self._merge(doc_spans, doc_embeddings)))
        return chunks

    def _embed(self, sentences: list[str]) -> np.ndarray:
        if not sentences:
            return np.zeros((0, 1), dtype=np.float32)
        matrix = np.asarray(self.embed_fn(sentences), dtype=np.float64)
        if matrix.ndim != 2 or matrix.shape[0] != len(sentences):
            raise ValueError(f"embed_fn returned shape {matrix.shape} for {len(sentences)} sentences")
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return matrix / np.where(norms > 0, norms, 1.0)

    def _merge(self, spans: list[Span], embeddings: np.ndarray) -> list[Span]:
        """Group consecutive sentence spans by the Alg 2 rule; returns one span per chunk."""
        if not spans:
            return []
        merged: list[Span] = [spans[0]]
        current_len = spans[0][1] - spans[0][0]
        for i in range(len(spans) - 1):
            next_len = spans[i + 1][1] - spans[i + 1][0]
            similarity = float(embeddings[i] @ embeddings[i + 1])
            if similarity > self.tau and current_len + next_len <= self.max_len:
                merged[-1] = (merged[-1][0], spans[i + 1][1])
                current_len += next_len
            else:
                merged.append(spans[i + 1])
                current_len = next_len
        return merged


# --------------------------------------------------------------------------------------------- index


class ChunkIndex:
    """Chunks by id, and each chunk's previous / next chunk within the same document."""

    def __init__(self, chunks: Iterable[Chunk]) -> None:
        self._by_id: dict[str, Chunk] = {}
        self._by_doc: dict[str, dict[int, Chunk]] = {}
        for chunk in chunks:
            if chunk.chunk_id in self._by_id:
                raise ValueError(f"chunks: duplicate chunk_id {chunk.chunk_id!r}")
            self._by_id[chunk.chunk_id] = chunk
            self._by_doc.setdefault(chunk.doc_id, {})[chunk.index] = chunk

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._by_id

    def get(self, chunk_id: str) -> Chunk:
        """The chunk with this id; ``KeyError`` naming the id when there is none."""
        try:
            return self._by_id[chunk_id]
        except KeyError:
            raise KeyError(f"unknown chunk_id {chunk_id!r}") from None

    def neighbours(self, chunk_id: str) -> tuple[Chunk | None, Chunk | None]:
        """``(previous, next)`` chunk of the same document (by ``index``), None at either end of the document."""
        chunk = self.get(chunk_id)
        siblings = self._by_doc[chunk.doc_id]
        return siblings.get(chunk.index - 1), siblings.get(chunk.index + 1)

    def document(self, doc_id: str) -> list[Chunk]:
        """All chunks of ``doc_id`` in order (empty when the document has none)."""
        siblings = self._by_doc.get(doc_id, {})
        return [siblings[i] for i in sorted(siblings)]
