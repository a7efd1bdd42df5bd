"""Labelled NLI pairs built from the embedded Wikipedia summaries, for training and measuring NLI judges.

Articles are :class:`~workbench.data.wikiqa.WikiArticle` rows read by :func:`workbench.data.wikiqa.load_articles`
(the one summaries loader). From each article's summary (its sentences split by :func:`pair_sentences`):

- **entailment**: premise = a window of up to ``window`` consecutive summary sentences, hypothesis = one of them;
- **contradiction**: the same kind of premise, hypothesis = one of its sentences with a year, a number or a named
  entity swapped for one taken from another article (same topic when possible) that the premise does not contain;
- **neutral**: the same kind of premise, hypothesis = a sentence from another article of the same topic.

Articles are split into train / validation first (by article key, seeded), and every pair draws its premise and
its donor article from one split only, so no article appears in both. Everything is deterministic given ``seed``
and the set of articles (their order does not matter).

Short-answer pairs (:class:`AnswerPair`, labels entailment = same answer / contradiction = different answer) are
built from article titles and their surface variants, plus a small hand-made set, :data:`BUILTIN_ANSWER_PAIRS`.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from workbench.core.errors import DataError
from workbench.data.nli_labels import CONTRADICTION, ENTAILMENT, NEUTRAL
from workbench.data.wikiqa import WikiArticle, load_articles, strip_qualifier


@dataclass(frozen=True)
class NLIPair:
    """A labelled pair: ``label`` 0 contradiction / 1 neutral / 2 entailment; ``article`` is the premise's article
    (its ``doc_id``), ``donor`` the article a swapped span or neutral sentence came from; ``kind`` says how it was
    made."""

    premise: str
    hypothesis: str
    label: int
    article: str
    kind: str
    donor: str | None = None
    question: str = ""


@dataclass(frozen=True)
class AnswerPair:
    """Two short answers to ``question``; ``label`` is 2 (entailment: same answer) or 0 (contradiction)."""

    question: str
    answer_a: str
    answer_b: str
    label: int

    @property
    def premise(self) -> str:
        """Answer A, as the premise an NLI judge sees."""
        return self.answer_a

    @property
    def hypothesis(self) -> str:
        """Answer B, as the hypothesis an NLI judge sees."""
        return self.answer_b


# --------------------------------------------------------------------------------------------- sentences, splitting

_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "prof", "st", "mt", "jr", "sr", "vs", "etc", "no", "vol", "fig", "approx", "ca", "c",
    "inc", "ltd", "co", "corp", "gen", "col", "lt", "sgt", "rev", "e.g", "i.e", "u.s", "u.k", "a.d", "b.c",
}  # fmt: skip
_BOUNDARY = re.compile(r"[.!?][\"'”’)]*(?=\s+[\"“'(]?[A-Z0-9])")


def pair_sentences(text: str) -> list[str]:
    """The pair builder's own sentence splitter: white space collapsed, then a split at ``.!?`` followed by white
    space and a capital or digit, except after a short list of abbreviations (``Dr.``, ``St.``, ``U.S.``, ``c.``)
    and single-letter initials (``Arthur C. Clarke``).

    Not :func:`workbench.data.chunkers.split_sentences`: the two differ on 106 of the 10,033 embedded summaries
    (``c. 1879`` stays whole here; ``G.I. Joe`` splits here), and the trained reference cross-encoder's pairs were
    built with this one."""
    text = " ".join(text.split())
    if not text:
        return []
    pieces, start = [], 0
    for match in _BOUNDARY.finditer(text):
        candidate = text[start : match.end()].strip()
        last = candidate.rsplit(" ", 1)[-1].rstrip(".!?\"'”’)").lower()
        if last in _ABBREVIATIONS or (len(last) == 1 and last.isalpha()):
            continue
        pieces.append(candidate)
        start = match.end()
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


def split_articles(
    articles: Sequence[WikiArticle], val_fraction: float, seed: int
) -> tuple[list[WikiArticle], list[WikiArticle]]:
    """Seeded split by ``doc_id`` into (train, validation), each sorted by ``doc_id``; at least one validation
    article when 0 < fraction."""
    if not 0.0 <= val_fraction < 1.0:
        raise DataError(f"val_fraction must be in [0, 1), got {val_fraction}", "split_articles")
    ordered = sorted(articles, key=lambda a: a.doc_id)
    random.Random(seed).shuffle(ordered)
    n_val = min(len(ordered) - 1, max(1, round(val_fraction * len(ordered)))) if val_fraction > 0 else 0
    val, train = ordered[:n_val], ordered[n_val:]
    return sorted(train, key=lambda a: a.doc_id), sorted(val, key=lambda a: a.doc_id)


# --------------------------------------------------------------------------------------------- swappable spans

_YEAR = re.compile(r"\b(?:1[0-9]{3}|20[0-9]{2})\b")
_NUMBER = re.compile(r"\b\d+(?:[.,]\d+)*\b")
_ENTITY = re.compile(r"\b[A-Z][a-z]+(?:[ -][A-Z][a-z]+)*\b")
_NOT_ENTITIES = {
    "The", "A", "An", "It", "Its", "In", "On", "At", "As", "He", "She", "His", "Her", "They", "Their", "This", "That",
    "These", "Those", "There", "For", "With", "After", "Before", "During", "From", "By", "Since", "While", "When",
    "Although", "However", "Some", "Most", "Many", "One", "Other", "Both", "Each", "Today", "Also", "If",
}  # fmt: skip
SWAP_KINDS = ("year", "number", "entity")


def swappable_spans(sentence: str) -> dict[str, list[str]]:
    """Candidate spans to swap, by kind: 4-digit years, other numbers, capitalised names (not starting with a
    function word such as ``The`` or ``In``, and not a single capitalised word opening the sentence)."""
    years = _YEAR.findall(sentence)
    numbers = [n for n in _NUMBER.findall(sentence) if n not in years]
    entities = [
        m.group()
        for m in _ENTITY.finditer(sentence)
        if m.group().split()[0] not in _NOT_ENTITIES and (m.start() > 0 or " " in m.group())
    ]
    return {"year": years, "number": numbers, "entity": entities}


def _replace_span(sentence: str, old: str, new: str) -> str:
    return re.sub(rf"\b{re.escape(old)}\b", new, sentence, count=1)


# --------------------------------------------------------------------------------------------- pair building


@dataclass
class _Indexed:
    article: WikiArticle
    sentences: list[str]
    spans: dict[str, list[str]]  # every swappable span in the article, by kind


def _index(articles: Sequence[WikiArticle], min_words: int) -> list[_Indexed]:
    indexed = []
    for article in articles:
        sentences = [s for s in pair_sentences(article.extract) if len(s.split()) >= min_words]
        if not sentences:
            continue
        spans: dict[str, list[str]] = defaultdict(list)
        for sentence in sentences:
            for kind, found in swappable_spans(sentence).items():
                spans[kind].extend(found)
        indexed.append(_Indexed(article, sentences, dict(spans)))
    return indexed


def _window(sentences: list[str], i: int, size: int, rng: random.Random) -> str:
    size = max(1, min(size, len(sentences)))
    first = rng.randint(max(0, i - size + 1), min(i, len(sentences) - size))
    return " ".join(sentences[first : first + size])


class _AllBut(Sequence):
    """``items`` but the one at position ``skip``, as a read-only view of the same list: an article's donors are the
    rest of its topic, and copying that list for every article made pairing quadratic in the topic's size."""

    def __init__(self, items: list[_Indexed], skip: int) -> None:
        self.items, self.skip = items, skip

    def __len__(self) -> int:
        return len(self.items) - 1

    def __getitem__(self, i: Any) -> Any:  # random.sample and random.choice ask ints
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.items[i if i < self.skip else i + 1]


def _donor_lists(pool: list[_Indexed]) -> list[Sequence[_Indexed]]:
    """Per article of ``pool`` (in order), the articles it may borrow spans and sentences from: the others of its
    topic, else every other article; never one sharing its doc id (ids may repeat in a caller's list)."""
    topics: dict[str, list[_Indexed]] = defaultdict(list)
    position: list[int] = []  # each article's place in its topic's list
    for item in pool:
        members = topics[item.article.topic]
        position.append(len(members))
        members.append(item)
    unique = len({item.article.doc_id for item in pool}) == len(pool)
    out: list[Sequence[_Indexed]] = []
    for k, item in enumerate(pool):
        same = topics[item.article.topic]
        if not unique:  # the general rule, by doc id
            doc = item.article.doc_id
            kin = [d for d in same if d.article.doc_id != doc]
            out.append(kin or [d for d in pool if d.article.doc_id != doc])
        else:
            out.append(_AllBut(same, position[k]) if len(same) > 1 else _AllBut(pool, k))
    return out


def _contradiction(
    item: _Indexed, premise: str, sentence: str, donors: Sequence[_Indexed], rng: random.Random
) -> NLIPair | None:
    spans = swappable_spans(sentence)
    kinds = [k for k in SWAP_KINDS if spans[k]]
    rng.shuffle(kinds)
    for kind in kinds:
        old = rng.choice(spans[kind])
        for donor in rng.sample(donors, min(len(donors), 8)):
            options = sorted({s for s in donor.spans.get(kind, []) if s != old and s not in premise})
            if options:
                new = rng.choice(options)
                hypothesis = _replace_span(sentence, old, new)
                if hypothesis != sentence:
                    return NLIPair(
                        premise, hypothesis, CONTRADICTION, item.article.doc_id, f"swap_{kind}", donor.article.doc_id
                    )
    return None


def _pairs_for_article(item: _Indexed, donors: Sequence[_Indexed], window: int, rng: random.Random) -> list[NLIPair]:
    """Entailment and contradiction form a minimal pair when possible (same premise, the same sentence with and
    without one swapped span), which forces a model to read the span rather than count shared words."""
    if not donors:
        return []
    sentences, key = item.sentences, item.article.doc_id
    order = rng.sample(range(len(sentences)), len(sentences))
    swappable = [i for i in order if any(swappable_spans(sentences[i]).values())]
    i = swappable[0] if swappable else order[0]
    premise = _window(sentences, i, window, rng)
    pairs = [NLIPair(premise, sentences[i], ENTAILMENT, key, "own_sentence")]
    swapped = _contradiction(item, premise, sentences[i], donors, rng) if swappable else None
    if swapped is not None:
        pairs.append(swapped)
    donor = rng.choice(donors)
    other = rng.choice(donor.sentences)
    premise = _window(sentences, rng.randrange(len(sentences)), window, rng)
    if other not in premise:
        pairs.append(NLIPair(premise, other, NEUTRAL, key, "other_article", donor.article.doc_id))
    return pairs


def build_split_pairs(
    articles: Sequence[WikiArticle], *, window: int = 3, min_words: int = 5, seed: int = 0
) -> list[NLIPair]:
    """Pairs for one split: for each article up to one entailment, one contradiction and one neutral pair, with
    every donor taken from ``articles`` only. Deterministic given ``seed`` and the article set."""
    rng = random.Random(seed)
    pool = _index(sorted(articles, key=lambda a: a.doc_id), min_words)
    pairs: list[NLIPair] = []
    for item, donors in zip(pool, _donor_lists(pool), strict=True):
        pairs.extend(_pairs_for_article(item, donors, window, rng))
    rng.shuffle(pairs)
    return pairs


def build_nli_pairs(
    articles: Sequence[WikiArticle] | None = None,
    *,
    val_fraction: float = 0.2,
    window: int = 3,
    min_words: int = 5,
    seed: int = 0,
) -> tuple[list[NLIPair], list[NLIPair]]:
    """(train, validation) NLI pairs from ``articles`` (by default the embedded Wikipedia summaries, read by
    :func:`~workbench.data.wikiqa.load_articles`), split by article before any pair is made. About 3 pairs per
    article, near-balanced labels (contradictions need a swappable span)."""
    articles = load_articles() if articles is None else list(articles)
    train_articles, val_articles = split_articles(articles, val_fraction, seed)
    train = build_split_pairs(train_articles, window=window, min_words=min_words, seed=seed)
    val = build_split_pairs(val_articles, window=window, min_words=min_words, seed=seed + 1)
    return train, val


def pairs_to_records(pairs: Sequence[NLIPair | AnswerPair]) -> list[dict]:
    """Plain dicts (JSON-ready) for saving pairs."""
    return [asdict(p) for p in pairs]


# --------------------------------------------------------------------------------------------- short answers

BUILTIN_ANSWER_PAIRS: tuple[AnswerPair, ...] = (
    AnswerPair("What is the capital of France?", "Paris", "paris, france", ENTAILMENT),
    AnswerPair("What is the capital of France?", "Paris", "The city of Paris", ENTAILMENT),
    AnswerPair("What is the capital of France?", "Paris", "Lyon", CONTRADICTION),
    AnswerPair("Who wrote Hamlet?", "William Shakespeare", "Shakespeare", ENTAILMENT),
    AnswerPair("Who wrote Hamlet?", "William Shakespeare", "Christopher Marlowe", CONTRADICTION),
    AnswerPair("Who developed the theory of relativity?", "Albert Einstein", "Einstein", ENTAILMENT),
    AnswerPair("Who developed the theory of relativity?", "Albert Einstein", "Isaac Newton", CONTRADICTION),
    AnswerPair("In which year did World War II end?", "1945", "in 1945", ENTAILMENT),
    AnswerPair("In which year did World War II end?", "1945", "1944", CONTRADICTION),
    AnswerPair("Which river flows through Cairo?", "the Nile", "Nile River", ENTAILMENT),
    AnswerPair("Which river flows through Cairo?", "the Nile", "the Amazon", CONTRADICTION),
    AnswerPair("Which planet is known as the Red Planet?", "Mars", "Mars.", ENTAILMENT),
    AnswerPair("Which planet is known as the Red Planet?", "Mars", "Jupiter", CONTRADICTION),
    AnswerPair("Who painted the Mona Lisa?", "Leonardo da Vinci", "Da Vinci", ENTAILMENT),
    AnswerPair("Who painted the Mona Lisa?", "Leonardo da Vinci", "Michelangelo", CONTRADICTION),
    AnswerPair("What is the chemical symbol for gold?", "Au", "AU", ENTAILMENT),
    AnswerPair("What is the chemical symbol for gold?", "Au", "Ag", CONTRADICTION),
    AnswerPair("Who was the first US president?", "George Washington", "George Bush", CONTRADICTION),
)


def title_paraphrases(title: str, description: str = "") -> list[str]:
    """Rewordings of a title that name the same thing, the title itself excluded: lower case, a leading ``the``,
    upper case, without a parenthetical qualifier (``Dune (novel)`` → ``Dune``), with the description appended,
    and as a short sentence.

    Not :func:`workbench.data.wikiqa.title_variants` (the title and its bare form: the names accepted as a gold
    answer); these are the equivalent answers of the short-answer pairs."""
    bare = strip_qualifier(title) or title
    variants = [title.lower(), f"the {bare}", f"It is {bare}.", bare.upper()]
    if bare != title:
        variants.append(bare)
    if description:
        variants.append(f"{bare}, {description[0].lower()}{description[1:]}")
    return list(dict.fromkeys(v for v in variants if v != title))


def _question(article: WikiArticle) -> str:
    what = article.description or f"a subject in {article.topic}"
    return f"Which {article.topic.lower()} subject is described as: {what}?"


def _tokens(text: str) -> set[str]:
    return {t for t in re.findall(r"\w+", text.lower()) if len(t) > 2}


def build_answer_pairs(
    articles: Sequence[WikiArticle] | None = None, *, n: int = 200, seed: int = 0
) -> list[AnswerPair]:
    """``n`` short-answer pairs, half equivalent (a title and one of its :func:`title_paraphrases`), half not (the
    title and another title of the same topic, preferring one that shares a word with it). ``articles`` default to
    the embedded summaries (:func:`~workbench.data.wikiqa.load_articles`). Deterministic given ``seed`` and the set
    of articles (they are taken in ``doc_id`` order)."""
    articles = sorted(load_articles() if articles is None else articles, key=lambda a: a.doc_id)
    if len(articles) < 2:
        raise DataError("need at least two articles to build answer pairs", "build_answer_pairs")
    rng = random.Random(seed)
    by_topic: dict[str, list[WikiArticle]] = defaultdict(list)
    for article in articles:
        by_topic[article.topic].append(article)
    chosen = rng.sample(articles, min(len(articles), (n + 1) // 2))
    pairs: list[AnswerPair] = []
    for article in chosen:
        question = _question(article)
        pairs.append(
            AnswerPair(
                question, article.title, rng.choice(title_paraphrases(article.title, article.description)), ENTAILMENT
            )
        )
        others = [a for a in by_topic[article.topic] if a.title.lower() != article.title.lower()]
        others = others or [a for a in articles if a.title.lower() != article.title.lower()]
        close = [a for a in others if _tokens(a.title) & _tokens(article.title)]
        other = rng.choice(close if close and rng.random() < 0.5 else others)
        pairs.append(AnswerPair(question, article.title, other.title, CONTRADICTION))
    rng.shuffle(pairs)
    return pairs[:n]
