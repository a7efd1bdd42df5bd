"""Scoring an answer to an either-or question: which option the reply names."""

from __future__ import annotations

import pytest

from workbench.metrics.qa import resolve_choice, score_answer

OPTIONS = ["Finland", "Sweden"]


@pytest.mark.parametrize(
    ("prediction", "index"),
    [
        ("Finland", 0),
        ("sweden.", 1),
        ("It is in Sweden", 1),
        ("B", 1),
        ("(a)", 0),
        ("Answer: B", 1),
        ("Finland or Sweden", -1),  # names both
        ("Norway", -1),
        ("", -1),
        ("C", -1),  # no third option
        ("Be careful", -1),  # a word starting with a letter is not a letter answer
    ],
)
def test_resolve_choice(prediction: str, index: int) -> None:
    assert resolve_choice(prediction, OPTIONS) == index


def test_an_option_inside_a_longer_option_does_not_count_twice() -> None:
    options = ["Paris", "Paris Hilton"]
    assert resolve_choice("Paris Hilton", options) == 1
    assert resolve_choice("Paris", options) == 0


def test_score_answer_with_options_scores_the_chosen_option() -> None:
    assert score_answer("Sweden", ["Sweden"], OPTIONS) == {"em": 1.0, "f1": 1.0, "contains": 1.0, "format_ok": 1.0}
    assert score_answer("Finland", ["Sweden"], OPTIONS) == {"em": 0.0, "f1": 0.0, "contains": 0.0, "format_ok": 1.0}
    assert score_answer("both", ["Sweden"], OPTIONS) == {"em": 0.0, "f1": 0.0, "contains": 0.0, "format_ok": 0.0}


def test_score_answer_without_options_is_the_open_scores() -> None:
    scores = score_answer("the Eiffel Tower", ["Eiffel Tower"])
    assert scores["em"] == 1.0 and scores["contains"] == 1.0 and scores["format_ok"] == 1.0
    assert score_answer("", ["Eiffel Tower"])["format_ok"] == 0.0
