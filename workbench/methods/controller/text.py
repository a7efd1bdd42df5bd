"""Text heuristics of the controllers: words and content words (keyword extraction), sentence-level stitching of a
chunk with its neighbours, and the completeness checks of a chunk's boundaries."""

from __future__ import annotations

import re

from workbench.data.stopwords import KEYWORD_STOP_WORDS

__all__ = [
    "STOP_WORDS",
    "completeness_checks",
    "content_words",
    "cut_words",
    "extractive_stitch",
    "norm_word",
    "sentences",
    "token_set",
    "words",
]

STOP_WORDS: frozenset[str] = KEYWORD_STOP_WORDS
"""English stop words (and question words) dropped when extracting keywords
(:data:`workbench.data.stopwords.KEYWORD_STOP_WORDS`)."""

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’\-]*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_DANGLING_STARTS = frozenset(
    """he she it they them this that these those his her its their such however therefore thus hence moreover
    furthermore also then besides meanwhile consequently additionally otherwise nevertheless instead but and or
    so because which who whom whose where""".split()  # noqa: SIM905
)
_DANGLING_PHRASES = ("as a result", "in addition", "on the other hand", "for this reason", "in turn", "after that")
_CLOSERS = "\"'”’)]}»"


def words(text: str) -> list[str]:
    """Word tokens of ``text`` (letters, digits, inner apostrophes and hyphens)."""
    return _WORD.findall(text)


def norm_word(word: str) -> str:
    """The lookup form of a word: lower case, curly apostrophe straightened, a final possessive ``'s`` dropped."""
    word = word.lower().replace("’", "'")
    return word[:-2] if word.endswith("'s") else word


def content_words(text: str) -> list[str]:
    """The words of ``text`` that are not stop words, in order, without repeats (case of first occurrence kept)."""
    seen: set[str] = set()
    out = []
    for word in words(text):
        key = norm_word(word)
        if key in STOP_WORDS or (len(key) < 2 and not key.isdigit()) or key in seen:
            continue
        seen.add(key)
        out.append(word)
    return out


def token_set(text: str) -> set[str]:
    """The distinct :func:`norm_word` forms of the words of ``text``."""
    return {norm_word(w) for w in words(text)}


def sentences(text: str) -> list[str]:
    """``text`` split after every ``.``, ``!`` or ``?`` followed by white space (no abbreviation rules: the
    controllers' own simple splitter, not :func:`workbench.data.chunkers.split_sentences`)."""
    return [s for s in _SENTENCE_END.split(text.strip()) if s]


def cut_words(text: str, max_words: int) -> str:
    """``text`` stripped when it has at most ``max_words`` whitespace tokens, else its first ``max_words`` joined
    by single spaces."""
    parts = text.split()
    return text.strip() if len(parts) <= max_words else " ".join(parts[:max_words])


def extractive_stitch(previous: str | None, center: str, following: str | None, max_tokens: int) -> str:
    """``previous + center + following`` cut to ``max_tokens`` whitespace tokens, keeping the center whole.

    The center comes first (cut only if alone it is over budget); the remaining budget goes to the neighbours'
    sentences nearest to the center, alternating previous (from its end) and next (from its start). Everything
    fits → the plain concatenation.
    """
    center = center.strip()
    if len(center.split()) >= max_tokens:
        return cut_words(center, max_tokens)
    budget = max_tokens - len(center.split())
    before = sentences(previous or "")
    after = sentences(following or "")
    head: list[str] = []
    tail: list[str] = []
    take_before = True
    while before or after:
        source = before if (take_before and before) or not after else after
        sentence = source[-1] if source is before else source[0]
        size = len(sentence.split())
        if size > budget:
            if source is before:
                before = []
            else:
                after = []
            continue
        budget -= size
        if source is before:
            head.insert(0, before.pop())
        else:
            tail.append(after.pop(0))
        take_before = not take_before
    return " ".join([*head, center, *tail])


def completeness_checks(text: str, min_words: int = 0) -> dict[str, bool]:
    """The heuristic completeness checks of a chunk.

    ``starts_clean``: the first word starts with a capital, a digit or a quote and is not a dangling pronoun or
    connective ("He", "This", "As a result"); ``ends_clean``: terminal punctuation (``.``, ``?``, ``!``) after
    stripping closing quotes and brackets; ``balanced``: (), [], {} balanced and an even number of straight double
    quotes; ``long_enough``: at least ``min_words`` words.
    """
    stripped = text.strip()
    first = words(stripped)[:1]
    lowered = stripped.lower()
    starts = bool(stripped) and (stripped[0].isupper() or stripped[0].isdigit() or stripped[0] in "\"'“‘(")
    dangling = (bool(first) and norm_word(first[0]) in _DANGLING_STARTS) or lowered.startswith(_DANGLING_PHRASES)
    end = stripped.rstrip(_CLOSERS + " ")
    balanced = stripped.count('"') % 2 == 0 and stripped.count("“") == stripped.count("”")
    depth = {"(": 0, "[": 0, "{": 0}
    closing = {")": "(", "]": "[", "}": "{"}
    for char in stripped:
        if char in depth:
            depth[char] += 1
        elif char in closing:
            depth[closing[char]] -= 1
            balanced = balanced and depth[closing[char]] >= 0
    balanced = balanced and not any(depth.values())
    return {
        "starts_clean": starts and not dangling,
        "ends_clean": end.endswith((".", "?", "!")),
        "balanced": balanced,
        "long_enough": len(stripped.split()) >= min_words,
    }
