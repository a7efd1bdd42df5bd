"""Either-or question templates of ``wiki-qa``: the built-in task on which a small model's answers carry signal.

Open questions about the embedded Wikipedia summaries are almost all answered wrongly by the 135M embedded model
(4 of 120 right closed-book), so its uncertainty features have nothing to predict. These templates name two options
in the question ("Was X Finnish or Swedish?"): closed-book the model is right somewhat more often than by chance,
and the gold passage, which states the answer, lifts it further (measured per template by ``bench-task``).

* ``choice_cloze`` — the first sentence with the title blanked (as ``cloze``), and two candidate names;
* ``choice_nationality`` — a person whose short description opens with a nationality ("Finnish architect"),
  and two nationalities;
* ``choice_country`` — a place whose short description says which country it lies in ("City in Turkey", the
  country being an article of the summaries), and two countries.

The second option is taken from a *neighbour* article: articles of the same topic ranked by the cosine
similarity of TF-IDF vectors over their title and description words. Each question draws a difficulty (seeded by
its article) and takes the neighbour from that difficulty's band of ranks: ``hard`` the 5 nearest, ``medium``
ranks 5–39, ``easy`` the rest. The distractor for a nationality or country is the neighbour's own nationality or
country. Lexical rather than MiniLM similarity keeps building the dataset free of any model (about 6 s for the 10,033
embedded summaries on 2 CPU cores, most of it blanking the cloze sentences);
the bands, not the similarity measure, set the spread of difficulty.

Every example has ``options`` (the two names, in a seeded order) and ``answer_index``; answers are scored by the
option the prediction names (:func:`workbench.metrics.qa.resolve_choice`). The gold option is first or second
equally often.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from workbench.data.schema import QAExample
from workbench.data.wiki_articles import (
    CHOICE_TEMPLATES,
    WikiArticle,
    answer_leaks,
    cloze_sentence,
    example_id,
    mentions_any,
    question_metadata,
    title_variants,
)

DIFFICULTY_BANDS: dict[str, tuple[int, int | None]] = {"hard": (0, 5), "medium": (5, 40), "easy": (40, None)}
_RANDOM_DRAWS = 32

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "the",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "by",
        "with",
        "or",
        "its",
        "his",
        "her",
        "their",
        "is",
        "was",
        "are",
        "who",
        "which",
    ]
)
# A nationality opens the description and is a demonym: a capitalised word with a demonym's ending.
_NATIONALITY = re.compile(r"^([A-Z][a-z]+(?:an|ese|ish|ch|i|ek|ss))\s+[a-z]")
_NOT_NATIONALITY = frozenset({"Sultan", "Khan", "Caliph", "Magic", "Classic"})
_MIN_NATIONALITY_COUNT = 3
_COUNTRY_DESCRIPTION = re.compile(
    r"^(?:country|sovereign state|island country|island nation|landlocked country|transcontinental country)\b",
    re.IGNORECASE,
)
_PLACE = re.compile(
    r"^(?:[\w-]+\s+){0,3}?(?:city|town|capital|municipality|region|province|state|island|river|mountain|lake|"
    r"commune|village|county|port|metropolis|prefecture|district)\b[^()]*?\bin (?:the )?([A-Z][\w ]+?)\s*$",
    re.IGNORECASE,
)


def nationality_of(article: WikiArticle) -> str | None:
    """The demonym that opens a person's short description ("Finnish architect ..." → "Finnish"), or None (also
    for articles outside the ``People`` topic)."""
    if article.topic != "People":
        return None
    match = _NATIONALITY.match(article.description)
    if match is None or match.group(1) in _NOT_NATIONALITY:
        return None
    return match.group(1)


def country_of(article: WikiArticle, countries: frozenset[str]) -> str | None:
    """The country a place's short description names ("City in Turkey" → "Turkey") when it is one of
    ``countries`` and not part of the place's own title, else None."""
    match = _PLACE.match(article.description)
    if match is None:
        return None
    country = match.group(1).strip()
    if country not in countries or mentions_any(article.title, [country]):
        return None
    return country


def country_titles(articles: Sequence[WikiArticle]) -> frozenset[str]:
    """Titles of the articles whose short description says they are a country."""
    return frozenset(a.title for a in articles if _COUNTRY_DESCRIPTION.match(a.description))


class Neighbours:
    """Articles of one pool ranked by TF-IDF cosine similarity of their title + description words.

    ``ranked(i)`` lists the other members' positions, most similar first. The similarities of the whole pool are
    one sparse product of L2-normalised TF-IDF rows, computed on first use (pools are one topic: at most a few
    thousand articles, so the dense similarity matrix stays a few tens of megabytes).
    """

    def __init__(self, articles: Sequence[WikiArticle]) -> None:
        from scipy.sparse import csr_matrix

        self.articles = list(articles)
        docs = [
            [w.lower() for w in _WORD.findall(f"{a.title} {a.description}") if w.lower() not in _STOP] for a in articles
        ]
        frequency = Counter(w for words in docs for w in set(words))
        vocabulary = {w: j for j, w in enumerate(sorted(frequency))}
        rows, cols, values = [], [], []
        for i, words in enumerate(docs):
            for word, count in Counter(words).items():
                rows.append(i)
                cols.append(vocabulary[word])
                values.append(count * math.log((1 + len(docs)) / (1 + frequency[word])))
        shape = (len(docs), max(1, len(vocabulary)))
        matrix = csr_matrix((np.asarray(values, dtype=np.float64), (rows, cols)), shape=shape)
        norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
        matrix = csr_matrix(matrix.multiply(1.0 / np.where(norms > 0, norms, 1.0)[:, None]))
        self._matrix = matrix
        self._similarity: np.ndarray | None = None

    def similarity(self, i: int, j: int) -> float:
        """Cosine similarity of members ``i`` and ``j``."""
        return float(self._scores()[i, j])

    def _scores(self) -> np.ndarray:
        if self._similarity is None:
            self._similarity = (self._matrix @ self._matrix.T).toarray().astype(np.float32)
        return self._similarity

    def ranked(self, i: int) -> np.ndarray:
        """Positions of every other member, most similar to member ``i`` first (ties by position)."""
        order = np.argsort(-self._scores()[i], kind="stable")
        return order[order != i]


def _difficulty(seed: int, template: str, doc_id: str) -> tuple[str, random.Random]:
    rng = random.Random(f"{seed}:{template}:{doc_id}")
    return rng.choice(sorted(DIFFICULTY_BANDS)), rng


def _pick_in_band(
    ranked: Sequence[int], difficulty: str, rng: random.Random, accept: Callable[[int], bool]
) -> tuple[int, int] | None:
    """A member (and its rank) from ``difficulty``'s band that ``accept`` takes, drawn at random (seeded); when
    the band has none, the nearest acceptable member outside it (so small pools still give questions)."""
    start, stop = DIFFICULTY_BANDS[difficulty]
    stop = len(ranked) if stop is None else min(stop, len(ranked))
    if start < stop:
        # a few random draws find an acceptable member of a wide band without shuffling all of it
        for _ in range(_RANDOM_DRAWS):
            rank = rng.randrange(start, stop)
            if accept(int(ranked[rank])):
                return int(ranked[rank]), rank
    for rank in (*range(start, stop), *range(len(ranked))):
        if accept(int(ranked[rank])):
            return int(ranked[rank]), rank
    return None


def _choice_example(
    template: str,
    article: WikiArticle,
    question_stem: Callable[[str, str], str],
    gold: str,
    distractor: str,
    aliases: Sequence[str],
    difficulty: str,
    rank: int,
    rng: random.Random,
    split: str,
) -> QAExample:
    options = [gold, distractor]
    rng.shuffle(options)
    question = question_stem(*options)
    metadata: dict[str, Any] = {**question_metadata(template, [article], split), "difficulty": difficulty, "rank": rank}
    return QAExample(
        id=example_id(template, article.doc_id),
        question=question,
        answers=list(dict.fromkeys([gold, *aliases])),
        options=options,
        answer_index=options.index(gold),
        gold_passages=[article.passage()],
        supporting_facts=[article.title],
        metadata=metadata,
    )


class ChoiceBuilder:
    """Builds the either-or templates for any subset of the articles, drawing distractors from all of them.

    ``articles``: every article of the summaries (distractors may come from any split: they are only names;
    gold passages stay within their question's split). ``seed`` fixes difficulties, distractors and option order.
    """

    def __init__(self, articles: Sequence[WikiArticle], seed: int = 0) -> None:
        self.seed = seed
        self.countries = country_titles(articles)
        by_topic: dict[str, list[WikiArticle]] = {}
        for article in articles:
            by_topic.setdefault(article.topic, []).append(article)
        self._pools = by_topic
        self._neighbours: dict[str, Neighbours] = {}
        self._position = {a.doc_id: (a.topic, i) for members in by_topic.values() for i, a in enumerate(members)}
        counts = Counter(n for a in articles if (n := nationality_of(a)) is not None)
        self.nationalities = frozenset(n for n, c in counts.items() if c >= _MIN_NATIONALITY_COUNT)

    def _ranked(self, article: WikiArticle) -> tuple[list[WikiArticle], np.ndarray]:
        topic, i = self._position[article.doc_id]
        if topic not in self._neighbours:
            self._neighbours[topic] = Neighbours(self._pools[topic])
        return self._pools[topic], self._neighbours[topic].ranked(i)

    def cloze(self, article: WikiArticle, split: str = "") -> QAExample | None:
        """``choice_cloze``: which of two titles fills the blank of the first sentence (None when unusable)."""
        masked = cloze_sentence(article)
        if masked is None:
            return None
        gold_variants = title_variants(article.title)
        pool, ranked = self._ranked(article)

        def accept(j: int) -> bool:
            other = pool[j].title
            return (
                "(" not in other
                and not mentions_any(masked, [other])
                and not mentions_any(other, gold_variants)
                and not mentions_any(article.title, [other])
            )

        difficulty, rng = _difficulty(self.seed, "choice_cloze", article.doc_id)
        picked = _pick_in_band(ranked, difficulty, rng, accept)
        if picked is None:
            return None
        gold = gold_variants[-1]  # the bare title: a parenthetical qualifier would give the answer away

        def stem(first: str, second: str) -> str:
            return f'Which name fills the blank, {first} or {second}? "{masked}." Reply with the name only.'

        example = _choice_example(
            "choice_cloze", article, stem, gold, pool[picked[0]].title, gold_variants, difficulty, picked[1], rng, split
        )
        return None if answer_leaks(masked, gold_variants) else example

    def nationality(self, article: WikiArticle, split: str = "") -> QAExample | None:
        """``choice_nationality``: which of two nationalities a person had (None when the description has none)."""
        gold = nationality_of(article)
        if gold is None or gold not in self.nationalities:
            return None
        pool, ranked = self._ranked(article)

        def accept(j: int) -> bool:
            other = nationality_of(pool[j])
            return other is not None and other in self.nationalities and other != gold

        difficulty, rng = _difficulty(self.seed, "choice_nationality", article.doc_id)
        picked = _pick_in_band(ranked, difficulty, rng, accept)
        if picked is None:
            return None
        distractor = nationality_of(pool[picked[0]])
        assert distractor is not None

        def stem(first: str, second: str) -> str:
            return f"Was {article.title} {first} or {second}? Reply with one word."

        return _choice_example(
            "choice_nationality", article, stem, gold, distractor, [], difficulty, picked[1], rng, split
        )

    def country(self, article: WikiArticle, split: str = "") -> QAExample | None:
        """``choice_country``: which of two countries a place lies in (None when the description names none)."""
        gold = country_of(article, self.countries)
        if gold is None:
            return None
        pool, ranked = self._ranked(article)

        def accept(j: int) -> bool:
            other = country_of(pool[j], self.countries)
            return other is not None and other != gold

        difficulty, rng = _difficulty(self.seed, "choice_country", article.doc_id)
        picked = _pick_in_band(ranked, difficulty, rng, accept)
        if picked is None:
            other_countries = sorted(self.countries - {gold})
            if not other_countries:
                return None
            distractor, rank = rng.choice(other_countries), -1  # no other place of this topic names a country
        else:
            distractor, rank = country_of(pool[picked[0]], self.countries), picked[1]
        assert distractor is not None

        def stem(first: str, second: str) -> str:
            return f"Is {article.title} in {first} or in {second}? Reply with the country only."

        return _choice_example("choice_country", article, stem, gold, distractor, [], difficulty, rank, rng, split)

    def build(self, template: str, articles: Sequence[WikiArticle], split: str) -> list[QAExample]:
        """Every usable question of ``template`` (one of :data:`CHOICE_TEMPLATES`) over ``articles``."""
        make = {"choice_cloze": self.cloze, "choice_nationality": self.nationality, "choice_country": self.country}
        if template not in CHOICE_TEMPLATES:
            raise ValueError(f"unknown either-or template {template!r} (known: {', '.join(CHOICE_TEMPLATES)})")
        return [q for a in articles if (q := make[template](a, split)) is not None]
