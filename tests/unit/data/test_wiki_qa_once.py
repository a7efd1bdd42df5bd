"""tests/wiki_qa_once.py: the session's wiki-qa builder runs the real one once per settings over the embedded
articles, gives the same rows as the real one, and runs it every time over other articles."""

from __future__ import annotations

from tests.unit.data import fake_articles
from tests.wiki_qa_once import BuiltOnce


def _counting_builder(calls: list):
    def build(articles, **settings):
        calls.append(settings)
        return {"train": ("rows of", len(articles), settings.get("seed"))}

    return build


def test_one_build_per_settings_over_the_reference_articles():
    calls: list = []
    reference = ["a", "b", "c"]
    built = BuiltOnce(_counting_builder(calls), lambda: reference)
    first = built(list(reference), seed=0, templates=("x", "y"))
    again = built(list(reference), seed=0, templates=["x", "y"])  # a list and a tuple of the same names: one key
    assert len(calls) == built.calls == 1 and again == first and again is not first
    again["extra"] = "a caller's own split"
    assert "extra" not in built(list(reference), seed=0, templates=("x", "y"))
    built(list(reference), seed=1, templates=("x", "y"))
    assert len(calls) == built.calls == 2


def test_other_articles_are_built_every_time():
    calls: list = []
    built = BuiltOnce(_counting_builder(calls), lambda: ["a", "b", "c"])
    built(["a", "b"], seed=0)
    built(["a", "b"], seed=0)
    built(["a", "b", "d"], seed=0)
    assert len(calls) == built.calls == 3


def test_the_rows_are_the_real_builders():
    from workbench.data.wikiqa import build_wikiqa

    real = build_wikiqa.build if isinstance(build_wikiqa, BuiltOnce) else build_wikiqa
    built = BuiltOnce(real, fake_articles)
    settings = {"seed": 3, "max_per_template": 2}
    direct = real(fake_articles(), **settings)
    for _ in range(2):
        once = built(fake_articles(), **settings)
        assert sorted(once) == sorted(direct)
        assert all(once[split].to_list() == direct[split].to_list() for split in direct)
    assert built.calls == 1


def test_the_session_builds_wiki_qa_through_it():
    from workbench.data import wikiqa

    assert isinstance(wikiqa.build_wikiqa, BuiltOnce) and wikiqa.build_wikiqa.reference == wikiqa.load_articles
