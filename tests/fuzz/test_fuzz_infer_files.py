"""Property: a crafted ``workbench infer --input`` file, or a crafted ``--output`` to resume, is answered or refused in
one line — never a traceback, never a question the runtime would refuse, never a byte of a refused output changed, and
never an id answered twice.

Input lines come from a valid row mutated (:func:`tests.fuzz.common.mutate`) plus raw lines an attacker would try:
duplicate keys, NaN, integers of thousands of digits, zero-width questions, invalid UTF-8, deep nesting, a line with
no newline. Outputs are rows this runtime wrote, edited the same ways, then resumed with the fake runtime of
tests/unit/runtime/test_batch_file_resume.py (no model).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.common import mutate, refused_or
from tests.unit.runtime.test_batch_file_resume import FakeRuntime
from workbench.runtime.batch_file import MAX_ID_CHARS, answer_file, read_questions
from workbench.runtime.questions import question_problem

ROW = {"id": "q1", "question": "Who wrote Hamlet?", "answers": ["Shakespeare"]}
RAW_LINES = [
    b'{"question": "a?", "question": "b?"}',
    b'{"id": "x", "id": "y", "question": "q?"}',
    b'{"question": "q?", "score": NaN}',
    b'{"question": "q?", "p": 1e999}',
    b'{"id": ' + b"7" * 5000 + b', "question": "q?"}',
    b'{"id": ' + b"7" * 40 + b', "question": "q?"}',
    b'{"id": "' + b"i" * (MAX_ID_CHARS + 1) + b'", "question": "q?"}',
    '{"question": "\u200b\u200d\ufeff"}'.encode(),
    b'{"question": "\\u200b\\u2060 "}',
    b'{"question": "bad \\ud800"}',
    b'{"question": "caf\xe9?"}',
    b"[" * 5000 + b"]" * 5000,
    b'{"question": ["q?"]}',
    b'{"question": "q?"}\r',
    b"\xef\xbb\xbf" + b'{"question": "bom?"}',
    b"",
    b"   ",
]
FINE_LINES = [
    b'{"id": 12, "question": "Fine?"}',
    '{"question": "Line\u2028separated?"}'.encode(),
    b'{"id": "' + b"i" * MAX_ID_CHARS + b'", "question": "Longest id?", "gold": [1, 2]}',
    b'{"id": -9223372036854775807, "question": "Smallest id?"}',
]
"""Lines that must be accepted, mixed in so that accepted files are drawn too."""


def _input_lines(data) -> list[bytes]:
    """Up to two crafted lines, one or two fine ones and up to two mutated rows, in a drawn order."""
    lines = data.draw(st.lists(st.sampled_from(RAW_LINES), max_size=2), label="raw lines")
    lines += data.draw(st.lists(st.sampled_from(FINE_LINES), min_size=1, max_size=2, unique=True), label="fine")
    for _ in range(data.draw(st.integers(0, 2), label="mutated rows")):
        try:
            lines.append(json.dumps(mutate(ROW, data), ensure_ascii=False).encode("utf-8", "surrogatepass"))
        except (TypeError, ValueError):
            continue
    return data.draw(st.permutations(lines), label="order")


@given(data=st.data(), final_newline=st.booleans())
def test_crafted_input_files(data, final_newline):
    lines = _input_lines(data)
    with tempfile.TemporaryDirectory(prefix="wb-fuzz-") as holder:
        path = Path(holder) / "q.jsonl"
        path.write_bytes(b"\n".join(lines) + (b"\n" if final_newline else b""))
        questions = refused_or("infer input", lambda: read_questions(path))
    if questions is not None:
        assert len({qid for qid, _ in questions}) == len(questions)
        for qid, question in questions:
            assert len(qid) <= MAX_ID_CHARS and question_problem(question) is None


@given(data=st.data(), cut=st.integers(0, 40))
def test_crafted_outputs_to_resume(data, cut):
    with tempfile.TemporaryDirectory(prefix="wb-fuzz-") as holder:
        questions = Path(holder) / "q.jsonl"
        questions.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Q {i}?"}) + "\n" for i in range(3)))
        output = Path(holder) / "a.jsonl"
        answer_file(FakeRuntime(), questions, output)
        rows = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
        index = data.draw(st.integers(0, 2), label="row")
        rows[index] = mutate(rows[index], data)
        try:
            lines = [json.dumps(row, ensure_ascii=False).encode("utf-8", "surrogatepass") for row in rows]
        except (TypeError, ValueError):
            return
        extra = data.draw(st.sampled_from([b"", *RAW_LINES]), label="appended")
        body = b"\n".join(lines) + b"\n" + extra[: cut or None]
        output.write_bytes(body)
        done = refused_or("infer output", lambda: answer_file(FakeRuntime(), questions, output))
        if done is None:
            assert output.read_bytes() == body  # a refused output is left exactly as it was
        else:
            ids = [json.loads(line)["id"] for line in output.read_text(encoding="utf-8").splitlines() if line.strip()]
            assert sorted(ids) == ["q0", "q1", "q2"]  # each question answered once, nothing lost
