"""The answer section's closed-book vs RAG plot per question template: bars with Wilson intervals."""

from __future__ import annotations

import json

from tests.plot_capture import error_bars
from workbench.metrics.proportion import wilson_interval
from workbench.stages.answer.report import answer_section, template_intervals, template_plot

SUMMARY = {  # the help-desk case: company questions need retrieval, general ones are hurt by it
    "split": "test",
    "n_questions": 19,
    "modes": {},
    "by_template": {
        "closed_book": {"company": {"n": 10, "contains": 0.0}, "general": {"n": 9, "contains": 6 / 9}},
        "rag": {"company": {"n": 10, "contains": 0.9}, "general": {"n": 9, "contains": 5 / 9}},
    },
}


def test_each_template_gets_its_wilson_interval_per_mode():
    got = template_intervals(SUMMARY["by_template"]["closed_book"], ["company", "general", "absent"])
    assert got == [wilson_interval(0, 10), wilson_interval(6, 9), None]
    assert got[0][0] == 0.0 and got[0][1] > 0.1  # none right of 10 is still uncertain, not [0, 0]


def test_the_plot_shows_both_modes_per_template_with_intervals(tmp_path, drawn):
    path = template_plot(SUMMARY, tmp_path / "by_template.png")
    assert path.stat().st_size > 2000
    (ax,) = drawn
    assert [t.get_text() for t in ax.get_xticklabels()] == ["company (n = 10)", "general (n = 9)"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["closed-book", "RAG"]
    closed, rag = wilson_interval(0, 10), wilson_interval(9, 10)
    general_closed, general_rag = wilson_interval(6, 9), wilson_interval(5, 9)
    expected = [(-0.2, *closed), (0.2, *rag), (0.8, *general_closed), (1.2, *general_rag)]
    assert [(round(x, 2), round(lo, 9), round(hi, 9)) for x, lo, hi in sorted(error_bars(ax))] == [
        (x, round(lo, 9), round(hi, 9)) for x, lo, hi in expected
    ]
    assert "closed-book vs RAG" in " ".join(ax.get_title().split())


def test_the_section_links_the_plot_under_the_template_table(tmp_path):
    summary = {
        **SUMMARY,
        "modes": {
            m: {
                "n": 19,
                "em": 0.5,
                "f1": 0.5,
                "contains": 0.5,
                "prompt_tokens": 90.0,
                "new_tokens": 5.0,
                "seconds_per_question": 0.1,
                "recall_at_k": None,
            }
            for m in ("closed_book", "rag")
        },
        "generator": "tiny",
        "generator_source": "config",
        "max_new_tokens": 12,
        "n_passages": 200,
        "retriever": "bm25",
        "k": 3,
        "threads": 1,
    }
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "examples.json").write_text("[]")

    class Config:
        name = "helpdesk"

        class data:
            dataset = "tickets.jsonl"

    _, lines = answer_section(tmp_path, tmp_path, Config)
    table = lines.index("## By question template")
    assert "![accuracy by template: closed-book vs RAG](by_template.png)" in lines[table:]
    assert (tmp_path / "by_template.png").is_file()
