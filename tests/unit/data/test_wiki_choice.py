"""Either-or templates of wiki-qa: which articles give questions, distractors, difficulty bands, determinism."""

from __future__ import annotations

import json

import pytest

from workbench.data.schema import QAExample
from workbench.data.wiki_choice import (
    DIFFICULTY_BANDS,
    ChoiceBuilder,
    Neighbours,
    country_of,
    country_titles,
    nationality_of,
)
from workbench.data.wikiqa import BLANK, WikiArticle, build_wikiqa, mentions


def _person(name: str, description: str) -> WikiArticle:
    return WikiArticle(
        name, name, f"{name} was a person of some renown. {name} lived a long life.", description, "People"
    )


def _place(name: str, description: str) -> WikiArticle:
    return WikiArticle(name, name, f"{name} is a place that many people visit every year.", description, "Geography")


def _country(name: str) -> WikiArticle:
    return WikiArticle(
        name, name, f"{name} is a country with a long coast and many rivers.", "Country in Europe", "Geography"
    )


def _articles() -> list[WikiArticle]:
    people = [
        _person("Jean Sibelius", "Finnish composer (1865–1957)"),
        _person("Alvar Aalto", "Finnish architect and designer"),
        _person("Tove Jansson", "Finnish author and illustrator"),
        _person("Ingmar Bergman", "Swedish film director"),
        _person("Greta Garbo", "Swedish actress"),
        _person("Alfred Nobel", "Swedish chemist and engineer"),
        _person("Henrik Ibsen", "Norwegian playwright"),
        _person("Edvard Munch", "Norwegian painter"),
        _person("Roald Amundsen", "Norwegian explorer"),
        _person("Ole Rømer", "Danish astronomer"),  # Danish: only once, too rare to be a nationality option
        _person("Suleiman the Magnificent", "Sultan of the Ottoman Empire"),  # not a demonym
        _person("Plato", "Ancient Greek philosopher"),  # "Ancient" opens the description: no nationality
    ]
    places = [
        _place("Turku", "City in Finland"),
        _place("Tampere", "City in Finland"),
        _place("Uppsala", "City in Sweden"),
        _place("Gothenburg", "Port city in Sweden"),
        _place("Bergen", "City in Norway"),
        _place("Norway House", "Town in Norway"),  # its title names the country: the question would give it away
        _place("Sweden Street", "Street in Sweden"),  # a street is not one of the place kinds
        _place("Lapland", "Region in Northern Europe"),  # not a country article
    ]
    return people + places + [_country("Finland"), _country("Sweden"), _country("Norway")]


def test_nationality_reads_a_demonym_opening_a_person_description() -> None:
    by_name = {a.title: a for a in _articles()}
    assert nationality_of(by_name["Jean Sibelius"]) == "Finnish"
    assert nationality_of(by_name["Ingmar Bergman"]) == "Swedish"
    assert nationality_of(by_name["Suleiman the Magnificent"]) is None
    assert nationality_of(by_name["Plato"]) is None
    assert nationality_of(_place("Turku", "Finnish city")) is None  # only the People topic


def test_country_reads_a_place_description_naming_a_country_article() -> None:
    articles = _articles()
    countries = country_titles(articles)
    assert countries == {"Finland", "Sweden", "Norway"}
    by_name = {a.title: a for a in articles}
    assert country_of(by_name["Turku"], countries) == "Finland"
    assert country_of(by_name["Gothenburg"], countries) == "Sweden"
    assert country_of(by_name["Lapland"], countries) is None
    assert country_of(by_name["Sweden Street"], countries) is None
    assert country_of(by_name["Norway House"], countries) is None  # its title names the country
    assert country_of(_place("Norwayville", "Town in Norway"), countries) == "Norway"  # whole words only


def test_neighbours_rank_by_shared_description_words() -> None:
    pool = [
        _person("A", "Finnish composer"),
        _person("B", "Swedish composer"),
        _person("C", "Norwegian explorer"),
        _person("D", "Finnish composer and conductor"),
    ]
    neighbours = Neighbours(pool)
    ranked = list(neighbours.ranked(0))
    assert ranked[0] == 3 and ranked[-1] == 2 and 0 not in ranked
    assert neighbours.similarity(0, 2) == pytest.approx(0.0)
    assert neighbours.similarity(0, 3) > neighbours.similarity(0, 1) > 0.0


def test_nationality_questions_name_two_nationalities_one_of_them_gold() -> None:
    builder = ChoiceBuilder(_articles(), seed=0)
    assert builder.nationalities == {"Finnish", "Swedish", "Norwegian"}
    questions = builder.build("choice_nationality", _articles(), "train")
    assert {q.supporting_facts[0] for q in questions} == {
        "Jean Sibelius", "Alvar Aalto", "Tove Jansson", "Ingmar Bergman", "Greta Garbo", "Alfred Nobel",
        "Henrik Ibsen", "Edvard Munch", "Roald Amundsen",
    }  # fmt: skip
    for q in questions:
        gold = nationality_of(next(a for a in _articles() if a.title == q.supporting_facts[0]))
        assert q.options[q.answer_index] == gold == q.answers[0]
        assert len(q.options) == 2 and q.options[0] != q.options[1]
        assert set(q.options) <= builder.nationalities
        assert all(option in q.question for option in q.options) and q.supporting_facts[0] in q.question
        assert q.metadata["difficulty"] in DIFFICULTY_BANDS and q.metadata["template"] == "choice_nationality"
        QAExample.from_row(q.to_row(), "choice question")  # satisfies the schema


def test_country_questions_take_the_distractor_from_another_place() -> None:
    questions = ChoiceBuilder(_articles(), seed=1).build("choice_country", _articles(), "train")
    assert {q.supporting_facts[0] for q in questions} == {"Turku", "Tampere", "Uppsala", "Gothenburg", "Bergen"}
    for q in questions:
        assert q.options[q.answer_index] == q.answers[0] and len(set(q.options)) == 2
        assert set(q.options) <= {"Finland", "Sweden", "Norway"}


def test_cloze_question_blanks_the_title_and_offers_a_topic_neighbour() -> None:
    articles = _articles()
    questions = ChoiceBuilder(articles, seed=0).build("choice_cloze", articles, "train")
    assert questions
    topics = {a.title: a.topic for a in articles}
    for q in questions:
        gold = q.options[q.answer_index]
        other = q.options[1 - q.answer_index]
        assert gold == q.supporting_facts[0] and BLANK in q.question
        assert topics[other] == topics[gold] and other != gold
        sentence = q.question.split('"')[1]
        assert not mentions(sentence, gold)


def test_difficulty_band_bounds_the_distractor_rank() -> None:
    questions = ChoiceBuilder(_articles(), seed=0).build("choice_cloze", _articles(), "train")
    for q in questions:
        start, stop = DIFFICULTY_BANDS[q.metadata["difficulty"]]
        rank = q.metadata["rank"]
        # a pool smaller than the band's start falls back to the nearest acceptable neighbour
        assert start <= rank < (stop or 10**9) or rank < start


def test_seed_fixes_everything_and_gold_position_varies() -> None:
    first = ChoiceBuilder(_articles(), seed=5).build("choice_nationality", _articles(), "train")
    again = ChoiceBuilder(_articles(), seed=5).build("choice_nationality", _articles(), "train")
    assert [q.to_row() for q in first] == [q.to_row() for q in again]
    positions = {q.answer_index for seed in range(4) for q in ChoiceBuilder(_articles(), seed=seed).build(
        "choice_nationality", _articles(), "train")}  # fmt: skip
    assert positions == {0, 1}


def test_unknown_template_is_refused() -> None:
    with pytest.raises(ValueError, match="riddle"):
        ChoiceBuilder(_articles()).build("riddle", _articles(), "train")


def test_build_wikiqa_keeps_options_and_gold_within_the_split() -> None:
    dd = build_wikiqa(_articles(), seed=0, fractions=(0.5, 0.0, 0.0, 0.5), ood_topics=[])
    rows = [row for split in ("train", "test") for row in dd[split]]
    assert rows and all(len(row["options"]) == 2 and row["answer_index"] in (0, 1) for row in rows)
    for split in ("train", "test"):
        ids = {row["gold_passages"][0]["doc_id"] for row in dd[split]}
        others = {row["gold_passages"][0]["doc_id"] for s in ("train", "test") if s != split for row in dd[s]}
        assert not ids & others
        assert all(json.loads(row["metadata"])["split"] == split for row in dd[split])
