"""The reader adapter's training rows: one per question and answer mode, the gold answer as the target."""

from __future__ import annotations

import pytest

from workbench.core.errors import DataError
from workbench.distill.reader import reader_rows, reader_target

EITHER_OR = {"id": "q1", "options": ["Abuja", "Brussels"], "answer_index": 1, "answers": ["Brussels", "Bruxelles"]}
OPEN = {"id": "q2", "options": [], "answer_index": -1, "answers": ["Ada Lovelace", "Lovelace"]}


def test_the_target_is_the_gold_option_or_else_the_first_alias():
    assert reader_target(EITHER_OR) == "Brussels"
    assert reader_target({**EITHER_OR, "answer_index": 0, "answers": ["Abuja"]}) == "Abuja"
    assert reader_target(OPEN) == "Ada Lovelace"
    assert reader_target({**EITHER_OR, "answer_index": 5}) == "Brussels"  # an index out of range: the alias
    with pytest.raises(DataError, match="'q3' has no gold answer"):
        reader_target({"id": "q3", "answers": ["  "]})


def test_one_row_per_question_and_mode_with_its_own_prompt():
    prompts = {"closed_book": ["c1", "c2"], "rag": ["r1", "r2"], "gold": ["g1", "g2"]}
    rows = reader_rows([EITHER_OR, OPEN], prompts)
    assert [(r["decision"], r["input"], r["target"]) for r in rows] == [
        ("closed_book", "c1", "Brussels"),
        ("closed_book", "c2", "Ada Lovelace"),
        ("rag", "r1", "Brussels"),
        ("rag", "r2", "Ada Lovelace"),
        ("gold", "g1", "Brussels"),
        ("gold", "g2", "Ada Lovelace"),
    ]
    assert all(r["single_token"] is False for r in rows)  # generative: training appends EOS
    assert [r["question_id"] for r in rows[:2]] == ["q1", "q2"]
    with pytest.raises(ValueError, match="1 prompts in mode 'rag' for 2 questions"):
        reader_rows([EITHER_OR, OPEN], {"rag": ["r1"]})
