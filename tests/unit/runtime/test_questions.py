"""The runtime's one question check (workbench.runtime.questions).

A question with no visible character (spaces, zero-width and other format characters, lone combining marks) or a lone
surrogate is refused by ``answer_many`` before any model is built, by ``workbench infer --input`` naming
``file:line``, and by ``serve`` (which uses the same check: tests/unit/serve)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.core.errors import DataError
from workbench.runtime import load_bundle
from workbench.runtime.batch_file import read_questions
from workbench.runtime.questions import is_blank, question_problem

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "bundles" / "tiny" / "1.0.0"
ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff"


@pytest.mark.parametrize(
    "text", ["", "   ", ZERO_WIDTH, f" {ZERO_WIDTH}\t", "\u3164\u2800", "\u0301\u0302", "\u202e\u2066", "\x00\x1f"]
)
def test_text_without_a_visible_character_is_blank(text):
    assert is_blank(text)
    assert question_problem(text).startswith("is blank")


@pytest.mark.parametrize("text", ["a", f"{ZERO_WIDTH}?", "é", "\u4e2d", "\u0661", "e\u0301"])
def test_one_visible_character_is_enough(text):
    assert not is_blank(text) and question_problem(text) is None


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        (ZERO_WIDTH, "questions: question 1 is blank"),
        ("why\ud800?", r"questions: question 1 holds a lone surrogate \(U\+D800\)"),
        (7, "questions: question 1 is of type int: only question strings are accepted"),
    ],
)
def test_the_runtime_refuses_before_building_any_model(question, expected):
    runtime = load_bundle(FIXTURE)  # its model paths do not exist here: building a method would fail otherwise
    with pytest.raises(DataError, match=expected) as err:
        runtime.answer_many(["Fine?", question], "no_rag")
    assert "\n" not in str(err.value) and runtime._built == {}


def test_infer_input_refuses_a_zero_width_question_naming_file_and_line(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "fine?"}\n{"id": "z", "question": "\\u200b\\u200d "}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"q.jsonl:2: 'question' is blank"):
        read_questions(path)
