"""wiki-qa builder: templates, determinism, split hygiene, OOD isolation, save/load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.data import by_title, fake_articles
from workbench.core.errors import DataError
from workbench.data.dataset_store import load_saved_dataset_dict, read_fingerprint, save_dataset_dict
from workbench.data.schema import QA_FEATURES
from workbench.data.wikiqa import (
    BLANK,
    DEFAULT_TEMPLATES,
    OPEN_TEMPLATES,
    SPLITS,
    TEMPLATES,
    WikiArticle,
    answer_leaks,
    assign_splits,
    build_wikiqa,
    load_articles,
    make_cloze,
    make_description,
    make_two_hop,
    mentions,
    strip_qualifier,
    template_counts,
    title_variants,
)

ALL_SPLITS = (*SPLITS, "ood")


def _meta(row):
    return json.loads(row["metadata"])


def _all_in_train(**kwargs):
    return build_wikiqa(fake_articles(), fractions=(1, 0, 0, 0), ood_topics=[], **kwargs)["train"]


# ------------------------------------------------------------------------------------------ loading


def test_load_articles_reads_entries_and_skips_empty_extracts(tmp_path: Path) -> None:
    raw = {
        "Tomato": {"title": "Tomato", "extract": "The tomato is a berry.", "description": "Edible berry", "topic": "X"},
        "Empty": {"title": "Empty", "extract": "  ", "description": "", "topic": "X"},
        "NoDesc": {"title": "NoDesc", "extract": "NoDesc is a thing."},
    }
    path = tmp_path / "summaries.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    articles = load_articles(path)
    assert [a.doc_id for a in articles] == ["Tomato", "NoDesc"]
    assert articles[0].description == "Edible berry" and articles[0].topic == "X"
    assert articles[1].description == "" and articles[1].topic == "Uncategorized"


def test_load_articles_bad_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(DataError, match=r"broken\.json"):
        load_articles(path)
    with pytest.raises(DataError, match=r"missing\.json"):
        load_articles(tmp_path / "missing.json")


def test_title_variants_strip_parenthetical_qualifier() -> None:
    assert title_variants("Dune (novel)") == ["Dune (novel)", "Dune"]
    assert title_variants("Paris") == ["Paris"]
    assert strip_qualifier(" Mercury (planet) ") == "Mercury" and strip_qualifier("(1965)") == ""


def test_mentions_is_whole_word_and_prefix_optional() -> None:
    assert mentions("Who painted The Starry Night?", "the starry night")
    assert not mentions("That hat is red", "at")
    assert not mentions("North American pigeon", "North America")
    assert mentions("North American pigeon", "North America", prefix=True)


def test_answer_leaks_uses_squad_normalisation() -> None:
    assert answer_leaks("___ is a galaxy in Centaurus.", ["Centaurus A"])  # the article "A" is dropped
    assert answer_leaks("made by AT&T engineers", ["AT&T"])
    assert not answer_leaks("___ is a galaxy.", ["Centaurus A"])


def test_cloze_dropped_when_normalised_title_remains() -> None:
    article = WikiArticle(
        "Centaurus A", "Centaurus A", "Centaurus A is a galaxy in the constellation of Centaurus.", "", "X"
    )
    assert make_cloze(article) is None


# ------------------------------------------------------------------------------------------ templates


def test_cloze_blanks_title_and_its_variant() -> None:
    example = make_cloze(by_title("Dune (novel)"), "train")
    assert example is not None
    assert example.question.startswith("Which name belongs in the blank?")
    assert f"{BLANK} is a 1965 science fiction novel" in example.question
    assert not mentions(example.question, "Dune")
    assert example.answers == ["Dune (novel)", "Dune"]
    assert [p.doc_id for p in example.gold_passages] == ["Dune (novel)"]
    assert example.gold_passages[0].text == by_title("Dune (novel)").extract
    assert example.metadata["template"] == "cloze" and example.metadata["topic"] == "Arts"


def test_cloze_matches_lower_case_title_and_blanks_every_mention() -> None:
    tomato = make_cloze(by_title("Tomato"))
    assert tomato is not None and f"The {BLANK} is the edible berry" in tomato.question
    coffee = make_cloze(by_title("Coffee"))
    assert coffee is not None and coffee.question.count(BLANK) == 2
    assert not mentions(coffee.question, "coffee")


def test_cloze_skipped_when_first_sentence_lacks_title() -> None:
    assert make_cloze(by_title("Pi")) is None  # "The number π is ..." never names "Pi"


def test_description_uses_description_and_a_title_free_clue() -> None:
    example = make_description(by_title("Hydrogen"))
    assert example is not None
    assert '"Chemical element with atomic number 1"' in example.question
    assert "the lightest element" in example.question
    assert not mentions(example.question, "Hydrogen")
    # "Tomatoes are grown ..." extends the title, so the clue is the third sentence
    tomato = make_description(by_title("Tomato"))
    assert tomato is not None and "originated in western South America" in tomato.question
    assert "Tomatoes" not in tomato.question


def test_description_skipped_without_description() -> None:
    assert make_description(by_title("Speed of light")) is None


def test_two_hop_question_structure() -> None:
    example = make_two_hop(by_title("Jazz"), by_title("New Orleans"), "train")
    assert example is not None
    assert example.answers == ["New Orleans"]
    assert [p.doc_id for p in example.gold_passages] == ["Jazz", "New Orleans"]
    assert example.supporting_facts == ["Jazz", "New Orleans"]
    assert '"Music genre"' in example.question and '"City in Louisiana, United States"' in example.question
    assert not mentions(example.question, "New Orleans") and not mentions(example.question, "Jazz")
    assert example.metadata["doc_ids"] == ["Jazz", "New Orleans"]


def test_two_hop_rejects_description_that_names_the_answer() -> None:
    # Dune's description names Frank Herbert, so the question would give the answer away
    assert make_two_hop(by_title("Dune (novel)"), by_title("Frank Herbert")) is None


def test_open_templates_on_fake_articles() -> None:
    train = _all_in_train(templates=OPEN_TEMPLATES)
    assert template_counts(train) == {"cloze": 20, "description": 20, "two_hop": 8}
    pairs = {tuple(_meta(r)["doc_ids"]) for r in train if _meta(r)["template"] == "two_hop"}
    assert pairs == {
        ("Jazz", "New Orleans"),
        ("Seine", "Paris"),
        ("Paris", "Seine"),  # "France" is skipped: Paris's description names it
        ("France", "Paris"),
        ("Vincent van Gogh", "France"),
        ("The Starry Night", "Vincent van Gogh"),
        ("Napoleon", "French Revolution"),
        ("French Revolution", "Napoleon"),
    }
    assert train.features == QA_FEATURES
    assert len(set(train["id"])) == train.num_rows


def test_default_templates_are_the_either_or_ones() -> None:
    assert DEFAULT_TEMPLATES == ("choice_cloze", "choice_nationality", "choice_country")
    assert set(template_counts(_all_in_train())) <= set(DEFAULT_TEMPLATES)


def test_templates_subset_and_cap() -> None:
    train = _all_in_train(templates=("cloze",), max_per_template=5)
    assert template_counts(train) == {"cloze": 5}
    capped = _all_in_train(templates=OPEN_TEMPLATES, max_per_template=3)
    assert template_counts(capped) == {"cloze": 3, "description": 3, "two_hop": 3}


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"fractions": (0.5, 0.5, 0.5, 0.0)}, "fractions"),
        ({"fractions": (1.0, 0.0)}, "fractions"),
        ({"templates": ("cloze", "riddle")}, "templates"),
        ({"max_per_template": 0}, "max_per_template"),
    ],
)
def test_bad_parameters_name_the_parameter(kwargs, name) -> None:
    with pytest.raises(ValueError, match=name):
        build_wikiqa(fake_articles(), **kwargs)


# ------------------------------------------------------------------------------------------ splits


def test_same_seed_same_rows_different_seed_different_assignment() -> None:
    first = build_wikiqa(fake_articles(), seed=3)
    second = build_wikiqa(fake_articles(), seed=3)
    for split in ALL_SPLITS:
        assert first[split].to_list() == second[split].to_list()
    a = assign_splits(fake_articles(), seed=3)
    b = assign_splits(fake_articles(), seed=4)
    assert a != b
    assert a.keys() == b.keys()


def test_assignment_sizes_follow_fractions() -> None:
    assignment = assign_splits(fake_articles(), seed=0)  # 18 in-distribution articles
    sizes = {split: list(assignment.values()).count(split) for split in ALL_SPLITS}
    assert sizes == {"train": 9, "calib": 4, "val": 1, "test": 4, "ood": 3}


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_no_article_in_two_splits(seed: int) -> None:
    dd = build_wikiqa(fake_articles(), seed=seed)
    owner: dict[str, str] = {}
    for split in ALL_SPLITS:
        for row in dd[split]:
            doc_ids = _meta(row)["doc_ids"] + [p["doc_id"] for p in row["gold_passages"]]
            for doc_id in doc_ids:
                assert owner.setdefault(doc_id, split) == split, f"{doc_id} in {owner[doc_id]} and {split}"
    assert sum(dd[s].num_rows for s in ALL_SPLITS) > 0


def test_ood_topics_only_in_ood_split() -> None:
    dd = build_wikiqa(fake_articles(), seed=0, ood_topics=["History", "Science"], templates=TEMPLATES)
    ood_topics = {t for row in dd["ood"] for t in _meta(row)["topics"]}
    assert ood_topics == {"History", "Science"}
    for split in SPLITS:
        topics = {t for row in dd[split] for t in _meta(row)["topics"]}
        assert not topics & {"History", "Science"}
    # a History -> History two-hop stays; History -> Places links cannot be made across splits
    ood_pairs = {tuple(_meta(r)["doc_ids"]) for r in dd["ood"] if _meta(r)["template"] == "two_hop"}
    assert ood_pairs == {("Napoleon", "French Revolution"), ("French Revolution", "Napoleon")}


def test_default_ood_topic_is_history() -> None:
    dd = build_wikiqa(fake_articles())
    assert {_meta(r)["topic"] for r in dd["ood"]} == {"History"}


# ------------------------------------------------------------------------------------------ save / load


def test_save_load_round_trip_and_stable_fingerprint(tmp_path: Path) -> None:
    dd = build_wikiqa(fake_articles(), seed=1)
    target = tmp_path / "wikiqa"
    fingerprint = save_dataset_dict(dd, target)
    assert read_fingerprint(target) == fingerprint
    loaded = load_saved_dataset_dict(target)
    assert set(loaded) == set(ALL_SPLITS)
    for split in ALL_SPLITS:
        assert loaded[split].to_list() == dd[split].to_list()
    # rebuilding with the same seed gives the same fingerprint; another seed does not
    assert save_dataset_dict(build_wikiqa(fake_articles(), seed=1), target) == fingerprint
    assert save_dataset_dict(build_wikiqa(fake_articles(), seed=2), tmp_path / "other") != fingerprint
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_load_missing_or_corrupt_dir_raises(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="directory missing"):
        load_saved_dataset_dict(tmp_path / "nothing")
    target = tmp_path / "wikiqa"
    save_dataset_dict(build_wikiqa(fake_articles()), target)
    arrow = next(target.rglob("*.arrow"))
    arrow.write_bytes(arrow.read_bytes()[:-16])
    with pytest.raises(DataError, match="corrupt") as info:
        load_saved_dataset_dict(target)
    assert str(target) in str(info.value)
    # without verification, the truncated Arrow file itself fails to load, still as a DataError
    with pytest.raises(DataError, match="cannot load"):
        load_saved_dataset_dict(target, verify=False)
    (target / "fingerprint.json").unlink()
    with pytest.raises(DataError, match=r"fingerprint\.json"):
        load_saved_dataset_dict(target)
