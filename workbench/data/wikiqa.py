"""The built-in ``wiki-qa`` dataset: questions generated from the embedded Wikipedia lead summaries.

Three templates, each with the article title as the gold answer:

* ``cloze`` — the article's first sentence with every mention of the title (and of the title without its
  parenthetical qualifier) replaced by a blank; the gold passage is the summary.
* ``description`` — the article's short description plus a clue sentence from the summary that does not
  mention the title.
* ``two_hop`` — a bridge question: article A's summary mentions article B's title; the question names A only by
  its (unique) short description and asks for the B it mentions by B's description. Gold passages: A and B.
  One per source article A: the first mentioned B that gives a valid question.

Articles, not questions, are assigned to splits (train / calib / val / test), so no article's text is the gold
passage of questions in two splits; a two-hop question is only made when A and B share a split. Articles whose
topic is one of ``ood_topics`` go only to the ``ood`` split. Everything is deterministic given the seed.

The articles, their loader and the text helpers live in :mod:`workbench.data.wiki_articles` (re-exported here), the
either-or templates in :mod:`workbench.data.wiki_choice`; this module imports both and neither imports it.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from datasets import DatasetDict

from workbench.data.article_splits import (  # the article split lives in a light module (recipe checks use it)
    DEFAULT_FRACTIONS,
    DEFAULT_OOD_TOPICS,
    OOD_SPLIT,
    SPLITS,
    assign_splits,
)
from workbench.data.chunkers import split_sentences
from workbench.data.schema import QAExample, examples_to_dataset
from workbench.data.wiki_articles import (  # the articles and the text helpers every template shares
    BLANK,
    BUILDER_VERSION,
    CHOICE_TEMPLATES,
    DATASET_NAME,
    DEFAULT_TEMPLATES,
    OPEN_TEMPLATES,
    TEMPLATES,
    WORD_TOKEN,
    WikiArticle,
    answer_leaks,
    cloze_sentence,
    example_id,
    load_articles,
    mentions,
    mentions_any,
    question_metadata,
    shorten,
    strip_qualifier,
    title_variants,
)
from workbench.data.wiki_choice import ChoiceBuilder

if TYPE_CHECKING:
    import datasets

__all__ = [  # the public names of wiki-qa, its articles' included (they live in workbench.data.wiki_articles)
    "BLANK",
    "BUILDER_VERSION",
    "CHOICE_TEMPLATES",
    "DATASET_NAME",
    "DEFAULT_FRACTIONS",
    "DEFAULT_OOD_TOPICS",
    "DEFAULT_TEMPLATES",
    "OOD_SPLIT",
    "OPEN_TEMPLATES",
    "SPLITS",
    "TEMPLATES",
    "WikiArticle",
    "answer_leaks",
    "assign_splits",
    "build_wikiqa",
    "cloze_sentence",
    "load_articles",
    "make_cloze",
    "make_description",
    "make_two_hop",
    "mentions",
    "strip_qualifier",
    "template_counts",
    "title_variants",
]

_MIN_CLUE_WORDS = 6
_MAX_LINK_TOKENS = 6


# --------------------------------------------------------------------------------------------- templates


def make_cloze(article: WikiArticle, split: str = "") -> QAExample | None:
    """A fill-in-the-blank question from :func:`cloze_sentence`, or None when there is none or the question
    leaks the title (see :func:`answer_leaks`)."""
    masked = cloze_sentence(article)
    if masked is None:
        return None
    variants = title_variants(article.title)
    question = f'Which name belongs in the blank? "{masked}."'
    if answer_leaks(question, variants):
        return None
    return QAExample(
        id=example_id("cloze", article.doc_id),
        question=question,
        answers=list(variants),
        gold_passages=[article.passage()],
        supporting_facts=[article.title],
        metadata=question_metadata("cloze", [article], split),
    )


def _clue(article: WikiArticle, variants: Sequence[str]) -> str | None:
    """The first non-opening sentence of the summary that avoids the title and has enough words."""
    for sentence in split_sentences(article.extract)[1:]:
        if len(WORD_TOKEN.findall(sentence)) >= _MIN_CLUE_WORDS and not mentions_any(sentence, variants, prefix=True):
            return shorten(sentence)
    return None


def make_description(article: WikiArticle, split: str = "") -> QAExample | None:
    """A question from the short description plus one clue sentence, or None when either is unusable.

    The description and the clue must not mention the title (or a variant, or a word extending its last word),
    and the question must not leak it (:func:`answer_leaks`).
    """
    variants = title_variants(article.title)
    if not article.description or mentions_any(article.description, variants, prefix=True):
        return None
    clue = _clue(article, variants)
    if clue is None:
        return None
    question = f'Which subject, described as "{article.description}", fits this clue: {clue}'
    if answer_leaks(question, variants):
        return None
    return QAExample(
        id=example_id("description", article.doc_id),
        question=question,
        answers=list(variants),
        gold_passages=[article.passage()],
        supporting_facts=[article.title],
        metadata=question_metadata("description", [article], split),
    )


def _link_key(text: str) -> str:
    return " ".join(WORD_TOKEN.findall(text))


def _sentence_start(text: str, position: int) -> bool:
    before = text[:position].rstrip()
    return not before or before[-1] in ".!?:\n"


def _inside_longer_name(text: str, tokens: Sequence[re.Match[str]], first: int, stop: int) -> bool:
    """True when tokens ``first..stop-1`` are glued (by white space only) to a capitalised neighbour, i.e. they are
    part of a longer name ("Empire" in "Ottoman Empire"); a capitalised word opening a sentence does not count."""
    if first > 0:
        before = tokens[first - 1]
        glued = text[before.end() : tokens[first].start()].isspace()
        if glued and before.group(0)[0].isupper() and not _sentence_start(text, before.start()):
            return True
    if stop < len(tokens):
        after = tokens[stop]
        glued = text[tokens[stop - 1].end() : after.start()].isspace()
        if glued and after.group(0)[0].isupper():
            return True
    return False


class _LinkFinder:
    """Finds, in a summary, the first case-sensitive whole-word mention of another article's title.

    Candidate targets: titles without a parenthetical qualifier, of at most six words and four characters,
    carried by exactly one article. A one-word title only counts when it is not at the start of a sentence, and
    no mention counts when it is glued to a neighbouring capitalised word (part of a longer name).
    """

    def __init__(self, articles: Sequence[WikiArticle]) -> None:
        counts: dict[str, int] = {}
        for article in articles:
            counts[_link_key(article.title)] = counts.get(_link_key(article.title), 0) + 1
        self.targets: dict[str, WikiArticle] = {}
        for article in articles:
            key = _link_key(article.title)
            words = key.split()
            if "(" in article.title or not words or len(words) > _MAX_LINK_TOKENS or len(key) < 4:
                continue
            if counts[key] == 1:
                self.targets[key] = article

    def links(self, source: WikiArticle) -> Iterator[WikiArticle]:
        """Other articles mentioned in ``source``'s summary, in order of mention (longest title first at one
        position); titles that contain, or are contained in, ``source``'s title are skipped."""
        tokens = list(WORD_TOKEN.finditer(source.extract))
        words = [t.group(0) for t in tokens]
        own = {_link_key(v) for v in title_variants(source.title)}
        for i, token in enumerate(tokens):
            for n in range(min(_MAX_LINK_TOKENS, len(words) - i), 0, -1):
                key = " ".join(words[i : i + n])
                target = self.targets.get(key)
                if target is None or key in own or target.doc_id == source.doc_id:
                    continue
                if n == 1 and _sentence_start(source.extract, token.start()):
                    continue
                if _inside_longer_name(source.extract, tokens, i, i + n):
                    continue
                if mentions_any(source.title, [target.title]) or mentions_any(target.title, [source.title]):
                    continue
                yield target


def make_two_hop(a: WikiArticle, b: WikiArticle, split: str = "") -> QAExample | None:
    """A bridge question asking for ``b`` through ``a`` (whose summary mentions ``b``), or None if unusable.

    Both articles need a description; neither description may mention ``b``'s title, nor ``a``'s description
    mention ``a``'s title (also as the start of a longer word, e.g. "American"); the descriptions must differ;
    the question must not leak ``b``'s title (:func:`answer_leaks`).
    """
    b_variants = title_variants(b.title)
    if not a.description or not b.description or a.description.lower() == b.description.lower():
        return None
    if mentions_any(a.description, b_variants, prefix=True) or mentions_any(b.description, b_variants, prefix=True):
        return None
    if mentions_any(a.description, title_variants(a.title), prefix=True):
        return None
    question = (
        f'The Wikipedia summary of the subject described as "{a.description}" mentions a subject described as '
        f'"{b.description}". What is that second subject?'
    )
    if answer_leaks(question, b_variants):
        return None
    return QAExample(
        id=example_id("two_hop", a.doc_id, b.doc_id),
        question=question,
        answers=list(b_variants),
        gold_passages=[a.passage(), b.passage()],
        supporting_facts=[a.title, b.title],
        metadata=question_metadata("two_hop", [a, b], split),
    )


# --------------------------------------------------------------------------------------------- splitting
# assign_splits (articles → train / calib / val / test / ood) lives in workbench.data.article_splits, imported above.


# --------------------------------------------------------------------------------------------- building


def _description_counts(articles: Iterable[WikiArticle]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for article in articles:
        key = article.description.lower()
        counts[key] = counts.get(key, 0) + 1
    return counts


def _questions_for_split(
    articles: Sequence[WikiArticle],
    split: str,
    templates: Sequence[str],
    description_counts: dict[str, int],
    choices: Any = None,
) -> dict[str, list[QAExample]]:
    """All questions of each template whose articles all lie in ``articles`` (one split).

    ``description_counts`` counts descriptions over *all* articles: a two-hop source must be unique there.
    ``choices``: the :class:`~workbench.data.wiki_choice.ChoiceBuilder` over all articles (either-or templates).
    """
    out: dict[str, list[QAExample]] = {t: [] for t in templates}
    for template in templates:
        if template in CHOICE_TEMPLATES:
            out[template] = choices.build(template, articles, split)
    if "cloze" in out:
        out["cloze"] = [q for a in articles if (q := make_cloze(a, split)) is not None]
    if "description" in out:
        out["description"] = [q for a in articles if (q := make_description(a, split)) is not None]
    if "two_hop" in out:
        finder = _LinkFinder(articles)
        for a in articles:
            if not a.description or description_counts.get(a.description.lower(), 0) != 1:
                continue  # A must be identifiable from its description alone
            question = next((q for b in finder.links(a) if (q := make_two_hop(a, b, split)) is not None), None)
            if question is not None:
                out["two_hop"].append(question)
    return out


def build_wikiqa(
    articles: Sequence[WikiArticle],
    *,
    seed: int = 0,
    templates: Sequence[str] = DEFAULT_TEMPLATES,
    max_per_template: int | None = None,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    ood_topics: Iterable[str] | None = None,
) -> datasets.DatasetDict:
    """Build the wiki-qa :class:`datasets.DatasetDict` with splits train / calib / val / test / ood.

    Articles are assigned to splits by :func:`assign_splits` (``ood_topics`` default: ``["History"]``; pass
    ``[]`` for none). ``max_per_template`` caps the questions of each template *in each split* (a seeded
    sample). Rows of each split are shuffled by ``seed``. Same inputs and seed give identical rows.
    """
    unknown = [t for t in templates if t not in TEMPLATES]
    if unknown or not templates:
        raise ValueError(f"templates must be a non-empty subset of {TEMPLATES}, got {list(templates)}")
    if max_per_template is not None and (not isinstance(max_per_template, int) or max_per_template <= 0):
        raise ValueError(f"max_per_template must be a positive integer or None, got {max_per_template!r}")
    ood_topics = DEFAULT_OOD_TOPICS if ood_topics is None else tuple(ood_topics)
    assignment = assign_splits(articles, seed=seed, fractions=fractions, ood_topics=ood_topics)

    description_counts = _description_counts(articles)
    choices = None
    if any(t in CHOICE_TEMPLATES for t in templates):
        choices = ChoiceBuilder(articles, seed=seed)
    result = {}
    for index, split in enumerate((*SPLITS, OOD_SPLIT)):
        members = sorted((a for a in articles if assignment[a.doc_id] == split), key=lambda a: a.doc_id)
        rng = random.Random(f"{seed}:{split}:{index}")
        rows: list[QAExample] = []
        for questions in _questions_for_split(members, split, templates, description_counts, choices).values():
            if max_per_template is not None and len(questions) > max_per_template:
                questions = rng.sample(questions, max_per_template)
            rows.extend(questions)
        rows.sort(key=lambda q: q.id)
        rng.shuffle(rows)
        result[split] = examples_to_dataset(rows)
    return DatasetDict(result)


def template_counts(ds: datasets.Dataset) -> dict[str, int]:
    """How many rows of ``ds`` come from each template (read from the metadata JSON)."""
    counts: dict[str, int] = {}
    for metadata in ds["metadata"]:
        template = json.loads(metadata).get("template", "?")
        counts[template] = counts.get(template, 0) + 1
    return counts
