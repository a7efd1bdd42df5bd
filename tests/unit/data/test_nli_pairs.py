"""NLI pair building: sentence splitting, the three labels on fake articles, split hygiene, determinism, the
short-answer pairs, and the default articles coming from the one summaries loader."""

from __future__ import annotations

import json

import pytest

from workbench.core.errors import DataError
from workbench.data.nli_labels import CONTRADICTION, ENTAILMENT, NEUTRAL
from workbench.data.nli_pairs import (
    BUILTIN_ANSWER_PAIRS,
    build_answer_pairs,
    build_nli_pairs,
    build_split_pairs,
    pair_sentences,
    pairs_to_records,
    split_articles,
    swappable_spans,
    title_paraphrases,
)
from workbench.data.wikiqa import WikiArticle


def _article(key: str, topic: str, text: str) -> WikiArticle:
    return WikiArticle(doc_id=key, title=key.replace("_", " "), extract=text, description=f"About {key}", topic=topic)


ARTICLES = [
    _article(
        "Paris", "Geography",
        "Paris is the capital of France. It was founded by the Parisii in 250 BC. The city hosted the "
        "Summer Olympics in 1924 and in 2024. About 2 million people live in the city proper.",
    ),
    _article(
        "Berlin", "Geography",
        "Berlin is the capital of Germany. The Berlin Wall divided the city from 1961 until 1989. "
        "It has 12 boroughs and lies on the River Spree.",
    ),
    _article(
        "Tokyo", "Geography",
        "Tokyo is the capital of Japan. It was formerly called Edo until 1868. The Greater Tokyo Area "
        "has 37 million residents and hosted the Olympics in 1964.",
    ),
    _article(
        "Albert_Einstein", "People",
        "Albert Einstein was a theoretical physicist born in Ulm in 1879. He received the Nobel Prize in "
        "Physics in 1921. Einstein emigrated to the United States in 1933.",
    ),
    _article(
        "Marie_Curie", "People",
        "Marie Curie was a physicist and chemist born in Warsaw in 1867. She won Nobel Prizes in 1903 and "
        "1911. Curie worked in Paris at the University of Paris for 28 years.",
    ),
    _article(
        "Isaac_Newton", "People",
        "Isaac Newton was an English mathematician born in Woolsthorpe in 1643. He published the Principia "
        "in 1687. Newton was President of the Royal Society for 24 years.",
    ),
]  # fmt: skip
BY_KEY = {a.doc_id: a for a in ARTICLES}


def test_pair_sentences():
    text = 'Arthur C. Clarke wrote it in 1968. Dr. Who met St. Paul in the U.S. Army. It was "great." Then 3 more!'
    assert pair_sentences(text) == [
        "Arthur C. Clarke wrote it in 1968.",
        "Dr. Who met St. Paul in the U.S. Army.",
        'It was "great."',
        "Then 3 more!",
    ]
    assert pair_sentences("  ") == []
    assert pair_sentences("no final stop") == ["no final stop"]
    # where it differs from data.chunkers.split_sentences (why the pair builder keeps its own splitter)
    assert pair_sentences("It is set in a town c. 1879. It premiered  in\nOslo.") == [
        "It is set in a town c. 1879.",
        "It premiered in Oslo.",
    ]


def test_swappable_spans():
    spans = swappable_spans("In 1921 the Nobel Prize went to 3 people in New York.")
    assert spans["year"] == ["1921"] and spans["number"] == ["3"]
    assert spans["entity"] == ["Nobel Prize", "New York"]  # "In" opens the sentence and is no entity


def _edit(before: str, after: str) -> tuple[str, str]:
    """The differing middle of two strings after removing their common prefix and suffix: (old, new)."""
    p = 0
    while p < min(len(before), len(after)) and before[p] == after[p]:
        p += 1
    q = 0
    while q < min(len(before), len(after)) - p and before[-1 - q] == after[-1 - q]:
        q += 1
    return before[p : len(before) - q], after[p : len(after) - q]


def test_labels_are_what_they_claim():
    pairs = build_split_pairs(ARTICLES, window=2, seed=3)
    assert {p.label for p in pairs} == {CONTRADICTION, NEUTRAL, ENTAILMENT}
    for pair in pairs:
        own = pair_sentences(BY_KEY[pair.article].extract)
        assert pair.premise in " ".join(own)  # a window of the article's own sentences
        if pair.label == ENTAILMENT:
            assert pair.hypothesis in own and pair.hypothesis in pair.premise and pair.donor is None
        elif pair.label == CONTRADICTION:
            assert pair.hypothesis not in own and pair.hypothesis not in pair.premise
            # exactly one span of one own sentence was replaced, by text taken from the donor article
            edits = [_edit(sentence, pair.hypothesis) for sentence in own]
            assert any(old and new and new in BY_KEY[pair.donor].extract for old, new in edits), pair
            assert BY_KEY[pair.donor].topic == BY_KEY[pair.article].topic
        else:
            donor = BY_KEY[pair.donor]
            assert pair.donor != pair.article and donor.topic == BY_KEY[pair.article].topic
            assert pair.hypothesis in pair_sentences(donor.extract)


def test_no_article_in_both_splits_and_determinism():
    train, val = build_nli_pairs(ARTICLES, val_fraction=0.34, seed=1)
    used_train = {p.article for p in train} | {p.donor for p in train if p.donor}
    used_val = {p.article for p in val} | {p.donor for p in val if p.donor}
    assert train and val and not used_train & used_val
    again = build_nli_pairs(ARTICLES, val_fraction=0.34, seed=1)
    assert again == (train, val)
    assert build_nli_pairs(ARTICLES, val_fraction=0.34, seed=2) != (train, val)


def test_split_articles():
    train, val = split_articles(ARTICLES, 0.5, seed=0)
    assert len(train) == len(val) == 3 and not {a.doc_id for a in train} & {a.doc_id for a in val}
    assert split_articles(ARTICLES, 0.0, seed=0)[1] == []
    with pytest.raises(DataError):
        split_articles(ARTICLES, 1.0, seed=0)


def test_default_articles_come_from_the_summaries_loader(tmp_path, monkeypatch):
    path = tmp_path / "summaries.json"
    rows = {
        a.doc_id: {"title": a.title, "extract": a.extract, "description": a.description, "topic": a.topic}
        for a in ARTICLES
    }
    path.write_text(json.dumps(rows))
    monkeypatch.setattr("workbench.data.wiki_articles.wiki_summaries_path", lambda: path)
    assert build_nli_pairs(val_fraction=0.34, seed=1) == build_nli_pairs(ARTICLES, val_fraction=0.34, seed=1)
    assert build_answer_pairs(n=6, seed=2) == build_answer_pairs(ARTICLES, n=6, seed=2)


def test_pairs_do_not_depend_on_article_order():
    shuffled = ARTICLES[::-1]
    assert build_nli_pairs(shuffled, val_fraction=0.34, seed=1) == build_nli_pairs(ARTICLES, val_fraction=0.34, seed=1)
    assert build_answer_pairs(shuffled, n=8, seed=0) == build_answer_pairs(ARTICLES, n=8, seed=0)


def test_answer_pairs():
    assert title_paraphrases("Dune (novel)", "1965 novel") == [
        "dune (novel)",
        "the Dune",
        "It is Dune.",
        "DUNE",
        "Dune",
        "Dune, 1965 novel",
    ]
    assert title_paraphrases("(1965)") == ["the (1965)", "It is (1965)."]  # nothing but a qualifier: kept whole
    pairs = build_answer_pairs(ARTICLES, n=8, seed=0)
    assert len(pairs) == 8 and {p.label for p in pairs} == {ENTAILMENT, CONTRADICTION}
    for pair in pairs:
        titles = {a.title for a in ARTICLES}
        assert pair.answer_a in titles and pair.premise == pair.answer_a and pair.hypothesis == pair.answer_b
        if pair.label == CONTRADICTION:
            assert pair.answer_b in titles and pair.answer_b != pair.answer_a
        else:
            assert pair.answer_b in title_paraphrases(pair.answer_a, f"About {pair.answer_a.replace(' ', '_')}")
    assert build_answer_pairs(ARTICLES, n=8, seed=0) == pairs
    assert len(BUILTIN_ANSWER_PAIRS) >= 12
    assert pairs_to_records(pairs[:1])[0]["question"] == pairs[0].question


def test_donors_are_every_other_article_of_the_topic_by_doc_id():
    """An article borrows from the other articles of its topic, or from every other article when it is alone in
    its topic, never from one with its own doc id — the view over the topic's list gives what filtering by doc id
    gives, and the general rule holds when a caller's list repeats a doc id."""
    import random

    from workbench.data.nli_pairs import _donor_lists, _index

    text = "Paris is the capital of France. It lies on the Seine. The city was founded in 250 BC."
    topics = ["cities", "cities", "rivers", "cities", "people"]
    for keys in (["a", "b", "c", "d", "e"], ["a", "b", "c", "a", "e"]):
        pool = _index([_article(k, t, text) for k, t in zip(keys, topics, strict=True)], 5)
        for item, donors in zip(pool, _donor_lists(pool), strict=True):
            doc = item.article.doc_id
            same = [d for d in pool if d.article.topic == item.article.topic and d.article.doc_id != doc]
            expected = same or [d for d in pool if d.article.doc_id != doc]
            assert [d.article.doc_id for d in donors] == [d.article.doc_id for d in expected]
            assert len(donors) == len(expected) and all(d is e for d, e in zip(donors, expected, strict=True))
            rng = random.Random(0)
            assert rng.sample(donors, min(2, len(donors))) == random.Random(0).sample(expected, min(2, len(expected)))
    with pytest.raises(IndexError):
        _donor_lists(pool)[0][len(_donor_lists(pool)[0])]
