"""The embedded Wikipedia articles behind ``wiki-qa``: the question templates' names, the article record and its
loader, the text helpers every template uses (title variants, whole-word mentions, answer leaks, example ids and
metadata) and the cloze sentence both the open and the either-or cloze ask about.

:mod:`workbench.data.wiki_choice` (the either-or templates) and :mod:`workbench.data.wikiqa` (the open templates and
the dataset builder) import this module; it imports neither.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.assets import wiki_summaries_path
from workbench.core.errors import DataError
from workbench.data.chunkers import split_sentences
from workbench.data.schema import Passage

DATASET_NAME = "wiki-qa"
BUILDER_VERSION = 1
OPEN_TEMPLATES: tuple[str, ...] = ("cloze", "description", "two_hop")
# The either-or templates are built by workbench.data.wiki_choice.
CHOICE_TEMPLATES: tuple[str, ...] = ("choice_cloze", "choice_nationality", "choice_country")
TEMPLATES: tuple[str, ...] = (*OPEN_TEMPLATES, *CHOICE_TEMPLATES)
DEFAULT_TEMPLATES: tuple[str, ...] = CHOICE_TEMPLATES
BLANK = "___"

_MAX_CLUE_CHARS = 240
WORD_TOKEN = re.compile(r"\w+(?:['’.-]\w+)*")
"""A word: letters and digits, joined by an apostrophe, full stop or hyphen ("O'Neill", "U.S", "Jean-Paul")."""
_PUNCTUATION = frozenset(string.punctuation) | {"‘", "’", "“", "”", "–", "—", "…"}


@dataclass(frozen=True)
class WikiArticle:
    """One Wikipedia lead summary: ``doc_id`` is its key in the summaries file (also the corpus doc id)."""

    doc_id: str
    title: str
    extract: str
    description: str
    topic: str

    def passage(self) -> Passage:
        """The whole summary as a gold passage."""
        return Passage(doc_id=self.doc_id, title=self.title, text=self.extract)


# --------------------------------------------------------------------------------------------- loading


def load_articles(path: str | Path | None = None) -> list[WikiArticle]:
    """Read a summaries JSON file (``{key: {title, extract, description, topic}}``; default: the embedded one).

    Articles with an empty extract are skipped; the rest are returned in file order. Raises :class:`DataError`
    naming the file when it cannot be read or is not a JSON object of such entries.
    """
    if path is None:
        path = wiki_summaries_path()
    where = str(path)
    try:
        with open(path, encoding="utf-8") as handle:
            raw = json.load(handle)
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read summaries: {exc}", where) from exc
    if not isinstance(raw, dict):
        raise DataError("expected a JSON object mapping keys to {title, extract, description, topic}", where)
    articles = []
    for key, entry in raw.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("title"), str):
            raise DataError(f"entry {key!r} has no string 'title'", where)
        extract = str(entry.get("extract") or "").strip()
        if extract:
            articles.append(
                WikiArticle(
                    doc_id=str(key),
                    title=entry["title"].strip(),
                    extract=extract,
                    description=str(entry.get("description") or "").strip(),
                    topic=str(entry.get("topic") or "Uncategorized"),
                )
            )
    return articles


# --------------------------------------------------------------------------------------------- text helpers


def strip_qualifier(title: str) -> str:
    """``title`` without a trailing parenthetical qualifier (``Dune (novel)`` → ``Dune``), stripped of white space;
    empty when the title is nothing but a qualifier."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", title).strip()


def title_variants(title: str) -> list[str]:
    """The names that count as the gold answer for an article: the title and the title without a trailing
    parenthetical qualifier (:func:`strip_qualifier`), longest first."""
    variants = [title.strip()]
    bare = strip_qualifier(title)
    if bare and bare != variants[0]:
        variants.append(bare)
    return sorted(dict.fromkeys(variants), key=len, reverse=True)


def _variant_pattern(variants: Sequence[str]) -> re.Pattern[str]:
    """Case-insensitive whole-word pattern for any variant (with an optional plural ending)."""
    alternatives = "|".join(re.escape(v) for v in variants)
    return re.compile(rf"(?<!\w)(?:{alternatives})(?:e?s)?(?!\w)", re.IGNORECASE)


def _normalise(text: str) -> str:
    """Lower-case words only (punctuation dropped), space-joined, padded with spaces for whole-word search."""
    return " " + " ".join(w.lower() for w in WORD_TOKEN.findall(text)) + " "


def mentions(text: str, phrase: str, *, prefix: bool = False) -> bool:
    """True when ``phrase`` occurs in ``text`` as whole words, ignoring case and punctuation.

    With ``prefix``, the phrase's last word may also be the start of a longer word ("America" in "American").
    """
    needle = _normalise(phrase)
    if not needle.strip():
        return False
    return (needle.rstrip() if prefix else needle) in _normalise(text)


def mentions_any(text: str, phrases: Iterable[str], *, prefix: bool = False) -> bool:
    """True when :func:`mentions` finds any of ``phrases`` in ``text``."""
    return any(mentions(text, phrase, prefix=prefix) for phrase in phrases)


def _answer_words(text: str) -> str:
    """SQuAD-style normal form: lower case, punctuation deleted, articles a / an / the dropped, space-padded."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " " + " ".join(w for w in text.split() if w not in ("a", "an", "the")) + " "


def answer_leaks(question: str, answers: Iterable[str]) -> bool:
    """True when any answer occurs in the question as whole words after SQuAD-style normalisation (the way
    answers are scored), e.g. "Centaurus A" leaks through "Centaurus"."""
    haystack = _answer_words(question)
    return any((needle := _answer_words(answer)).strip() and needle in haystack for answer in answers)


def shorten(text: str, limit: int = _MAX_CLUE_CHARS) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters (with an ellipsis when cut)."""
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0].rstrip(",;:") + " …"


def example_id(template: str, *doc_ids: str) -> str:
    """The question id ``wikiqa-<template>-<12 hex digits>``, a digest of the source articles' ``doc_ids``."""
    digest = hashlib.sha256("\x1f".join(doc_ids).encode("utf-8")).hexdigest()[:12]
    return f"wikiqa-{template}-{digest}"


def question_metadata(template: str, articles: Sequence[WikiArticle], split: str) -> dict[str, Any]:
    """A question's ``metadata``: dataset and builder version, ``template``, the source ``articles``' topics, ids and
    titles (the first article's topic as ``topic``), and ``split``."""
    return {
        "dataset": DATASET_NAME,
        "builder_version": BUILDER_VERSION,
        "template": template,
        "topic": articles[0].topic,
        "topics": [a.topic for a in articles],
        "doc_ids": [a.doc_id for a in articles],
        "source_titles": [a.title for a in articles],
        "split": split,
    }


def cloze_sentence(article: WikiArticle) -> str | None:
    """The article's first sentence with every title mention blanked (no final full stop), or None.

    None when the sentence does not mention the title, the title still shows through after blanking, or fewer
    than four words remain besides the blank.
    """
    sentences = split_sentences(article.extract)
    if not sentences:
        return None
    variants = title_variants(article.title)
    pattern = _variant_pattern(variants)
    first = sentences[0]
    if not pattern.search(first):
        return None
    masked = pattern.sub(BLANK, first).rstrip(" .")
    if mentions_any(masked, variants) or len(WORD_TOKEN.findall(masked)) < 4:
        return None
    return masked
