"""The evaluate table's BCa intervals (workbench/stages/evaluate/intervals.py) and their cells in the report."""

from __future__ import annotations

import numpy as np

from workbench.metrics.bootstrap import mean_interval
from workbench.stages.evaluate.intervals import quality_intervals
from workbench.stages.evaluate.report import quality_cell


def _records(method: str, contains: list[float], retrieved: list[bool]) -> list[dict]:
    return [
        {"method": method, "id": f"q{i}", "em": c, "f1": c / 2, "contains": c, "retrieved": r}
        for i, (c, r) in enumerate(zip(contains, retrieved, strict=True))
    ]


def test_each_method_gets_the_bootstrap_helpers_interval_of_its_means():
    closed = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    rag = [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    # the router retrieves for q1..q4: right on q1, q2, q4 (closed-book wrong), wrong on q3 (closed-book right)
    routed = [False, True, True, True, True, False, False, False, False, False]
    records = _records("no_rag", closed, [False] * 10) + _records("router", rag, routed)
    intervals = quality_intervals(records, draws=400, seed=3)
    assert list(intervals) == ["no_rag", "router"]
    for key in ("em", "contains"):  # the same figure as the helper's interval of the mean, on the same resamples
        expected = mean_interval(rag, n_resamples=400, seed=3)
        assert np.allclose(intervals["router"][key], [expected.low, expected.high])
    assert np.allclose(intervals["router"]["f1"], [expected.low / 2, expected.high / 2])
    # decision accuracy per question: the router decided right where retrieved == (no_rag wrong)
    decided = [float(r == (c < 0.5)) for r, c in zip(routed, closed, strict=True)]
    assert np.mean(decided) == 0.6
    expected = mean_interval(decided, n_resamples=400, seed=3)
    assert np.allclose(intervals["router"]["decision_accuracy"], [expected.low, expected.high])
    low, high = intervals["router"]["decision_accuracy"]
    assert low < 0.6 < high
    # no_rag never retrieves: right exactly where its own answer is right (4 of 10)
    low, high = intervals["no_rag"]["decision_accuracy"]
    assert low < 0.4 < high


def test_without_a_closed_book_method_there_is_no_decision_accuracy_interval_and_one_question_gives_none():
    records = _records("standard_rag", [1.0, 0.0, 1.0], [True] * 3) + _records("flare", [1.0], [True])
    intervals = quality_intervals(records, draws=100)
    assert set(intervals["standard_rag"]) == {"em", "f1", "contains"}
    assert intervals["flare"]["em"] == [None, None]


def test_quality_cells_show_the_interval_or_fall_back_to_the_plain_value():
    row = {
        "em": 0.625,
        "decision_accuracy": float("nan"),
        "intervals": {"em": [0.48, 0.75], "decision_accuracy": [None, None]},
    }
    assert quality_cell(row, "em") == "0.62 [0.48, 0.75]"
    assert quality_cell(row, "decision_accuracy") == "–"
    assert quality_cell({"f1": 0.5}, "f1") == "0.500"


def test_the_table_says_how_its_intervals_were_made_and_nothing_for_an_older_summary():
    from workbench.stages.evaluate.report import interval_words

    words = interval_words({"bootstrap": {"draws": 2000, "level": 0.9}})
    assert words == (
        " EM, token F1, containment and decision accuracy are means over the questions, each with its 90% BCa "
        "bootstrap interval (2,000 resamples of the questions) in brackets."
    )
    assert interval_words({}) == ""
