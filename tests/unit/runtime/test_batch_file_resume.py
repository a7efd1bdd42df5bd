"""`workbench infer --input/--output` resumes anything it wrote (workbench.runtime.batch_file), with a fake runtime.

The fake runtime has the Runtime interface (name, version, methods, method(name), answer_many returning real
RuntimeAnswer objects) and no model; it records which methods were built and which questions were asked, so "nothing
left to answer loads no model" is checked as "method() was never called". Each attack below fails without its fix.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import workbench
from workbench.core.errors import ConfigError, DataError
from workbench.runtime.batch_file import answer_file, read_questions
from workbench.runtime.runtime import RuntimeAnswer

ODD = "\u2028 \u2029 \x85 \x0b \x1c"  # every character str.splitlines breaks on that json.dumps may leave raw


class FakeRuntime:
    """The Runtime's interface without a model: answers echo the question; ``fail_on`` makes a question raise."""

    def __init__(self, methods=("no_rag", "d2rag"), name="fake", version="1.0.0", output=None, fail_on=None):
        self.name, self.version, self.methods = name, version, tuple(methods)
        self.built: list[str | None] = []
        self.calls: list[list[str]] = []
        self.sizes: list[int | None] = []
        self.rows_before_call: list[int] = []
        self.output, self.fail_on = output, fail_on

    def method(self, name: str | None = None) -> Any:
        name = name or ("d2rag" if "d2rag" in self.methods else self.methods[0])  # as Runtime.method resolves it
        self.built.append(name)  # recorded first: building is what loads the models
        if name not in self.methods:
            raise ConfigError(f"method {name!r} is not in this bundle", "method")
        return SimpleNamespace(name=name)

    def answer_many(self, questions, method=None, batch_size=None) -> list[RuntimeAnswer]:
        if self.output is not None:
            self.rows_before_call.append(len(self.output.read_bytes().split(b"\n")) - 1 if self.output.exists() else 0)
        self.calls.append(list(questions))
        self.sizes.append(batch_size)
        if self.fail_on is not None and self.fail_on in questions:
            raise KeyboardInterrupt
        return [
            RuntimeAnswer(question=q, method=method, text=f"A: {q}", retrieved=False, decoding="-") for q in questions
        ]


def write_questions(path: Path, questions: list[str], ids: bool = True) -> Path:
    rows = [({"id": f"q{i}"} if ids else {}) | {"question": q, "answers": ["gold"]} for i, q in enumerate(questions)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def rows(output: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.read_bytes().decode("utf-8").split("\n") if line]


@pytest.fixture
def files(tmp_path):
    questions = write_questions(tmp_path / "q.jsonl", [f"Question {i}?" for i in range(4)])
    return questions, tmp_path / "out" / "a.jsonl"


# ---------------------------------------------------------------------------------------------------------- lines
def test_line_separators_in_questions_and_answers_resume(tmp_path):
    questions = write_questions(tmp_path / "q.jsonl", [f"one{ODD}two?", "plain?", f"three{ODD}?"])
    output = tmp_path / "a.jsonl"
    assert [q for _, q in read_questions(questions)] == [f"one{ODD}two?", "plain?", f"three{ODD}?"]
    answer_file(FakeRuntime(), questions, output)
    text = output.read_text(encoding="utf-8")
    assert len(text.splitlines()) == 3 == text.count("\n")  # one row is one line for any line splitter
    assert [r["question"] for r in rows(output)] == [f"one{ODD}two?", "plain?", f"three{ODD}?"]
    assert rows(output)[0]["answer"] == f"A: one{ODD}two?"
    again = FakeRuntime()
    done = answer_file(again, questions, output)
    assert (done.answered, done.skipped) == (0, 3) and again.built == []


def test_input_lines_end_at_newline_only_with_crlf_and_bom(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"question": "a\xe2\x80\xa8b?"}\r\n\r\n{"question": "c?"}\r\n')
    assert read_questions(path) == [("1", "a\u2028b?"), ("3", "c?")]  # ids are \n line numbers


def test_invalid_utf8_in_the_input_is_one_line_naming_file_and_line(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_bytes(b'{"question": "ok?"}\n{"question": "caf\xe9?"}\n')
    with pytest.raises(DataError) as err:
        read_questions(path)
    assert str(err.value).startswith(f"{path}:2: not valid UTF-8") and "\n" not in str(err.value)


def test_lone_surrogate_question_refused_and_answer_surrogate_escaped(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "bad \\ud800?"}\n')
    with pytest.raises(DataError, match=r"q.jsonl:1: 'question' holds a lone surrogate \(U\+D800\)"):
        read_questions(path)
    questions = write_questions(tmp_path / "ok.jsonl", ["fine?"])
    runtime = FakeRuntime()
    runtime.answer_many = lambda qs, m=None, batch_size=None: [
        RuntimeAnswer(question=q, method=m, text="half \ud800", retrieved=False, decoding="-") for q in qs
    ]
    answer_file(runtime, questions, tmp_path / "a.jsonl")
    assert rows(tmp_path / "a.jsonl")[0]["answer"] == "half \ud800"  # valid UTF-8 on disk, read back exactly


def test_invalid_utf8_in_the_output_is_one_line_naming_file_and_line(files):
    questions, output = files
    answer_file(FakeRuntime(), questions, output)
    lines = output.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b"Question 1", b"Question \xff")
    output.write_bytes(b"\n".join(lines))
    with pytest.raises(DataError) as err:
        answer_file(FakeRuntime(), questions, output)
    assert str(err.value).startswith(f"{output}:2: not valid UTF-8") and "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------------------------- rows
def test_rows_carry_bundle_version_method_and_question_hash(files):
    questions, output = files
    done = answer_file(FakeRuntime(name="wiki", version="2.1.0"), questions, output, method="no_rag")
    assert (done.total, done.skipped, done.answered, done.method) == (4, 0, 4, "no_rag")
    first = rows(output)[0]
    assert list(first)[:7] == ["id", "question", "question_sha256", "bundle", "bundle_version", "method", "answer"]
    assert first["question_sha256"] == hashlib.sha256(b"Question 0?").hexdigest()
    assert (first["bundle"], first["bundle_version"], first["method"]) == ("wiki", "2.1.0", "no_rag")
    assert "trace" not in first and "gold" not in output.read_text()


@pytest.mark.parametrize(
    ("second", "method", "expected"),
    [
        (FakeRuntime(), "d2rag", "was answered by 'fake' '1.0.0' with 'no_rag'"),
        (FakeRuntime(name="other"), "no_rag", "was answered by 'fake' '1.0.0' with 'no_rag'"),
        (FakeRuntime(version="1.0.1"), "no_rag", "was answered by 'fake' '1.0.0' with 'no_rag'"),
        (FakeRuntime(), None, "this run: 'fake' '1.0.0' with 'd2rag'"),  # the default method is another one
    ],
)
def test_resuming_with_another_method_or_bundle_is_refused(files, second, method, expected):
    questions, output = files
    answer_file(FakeRuntime(), questions, output, method="no_rag")
    before = output.read_bytes()
    with pytest.raises(DataError) as err:
        answer_file(second, questions, output, method=method)
    message = str(err.value)
    assert message.startswith(f"{output}:1: id 'q0'") and expected in message and "use another --output" in message
    assert "\n" not in message and second.built == [] and output.read_bytes() == before


def test_resuming_with_a_changed_question_is_refused(files, tmp_path):
    questions, output = files
    answer_file(FakeRuntime(), questions, output)
    write_questions(questions, ["Question 0?", "Another question?", "Question 2?", "Question 3?"])
    with pytest.raises(DataError, match=r"a.jsonl:2: id 'q1' was answered for another question"):
        answer_file(FakeRuntime(), questions, output)
    # ids that are line numbers shift when a line is inserted: caught by the hash too
    plain = write_questions(tmp_path / "plain.jsonl", ["A?", "B?"], ids=False)
    answer_file(FakeRuntime(), plain, tmp_path / "plain-out.jsonl")
    write_questions(plain, ["A?", "New?", "B?"], ids=False)
    with pytest.raises(DataError, match=r"plain-out.jsonl:2: id '2' was answered for another question"):
        answer_file(FakeRuntime(), plain, tmp_path / "plain-out.jsonl")


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (
            {"id": "q0", "question": "Question 0?", "method": "d2rag", "answer": "x"},
            "a row from an older `workbench infer`",
        ),
        ({"note": "hello"}, "not an answer row written by `workbench infer`"),
        ([1, 2], "not an answer row written by `workbench infer`"),
    ],
)
def test_rows_of_another_format_are_refused(files, row, expected):
    questions, output = files
    output.parent.mkdir()
    output.write_text(json.dumps(row) + "\n")
    runtime = FakeRuntime()
    with pytest.raises(DataError, match=f"a.jsonl:1: {expected}") as err:
        answer_file(runtime, questions, output)
    assert "use another --output" in str(err.value) and runtime.built == []


def test_rows_for_ids_not_in_the_input_or_repeated_are_refused(files):
    questions, output = files
    answer_file(FakeRuntime(), questions, output)
    lines = output.read_text(encoding="utf-8").split("\n")
    output.write_text("\n".join([lines[0], lines[0], *lines[1:]]), encoding="utf-8")
    with pytest.raises(DataError, match=r"a.jsonl:2: id 'q0' appears twice"):
        answer_file(FakeRuntime(), questions, output)
    write_questions(questions, ["Question 0?"])
    output.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(DataError, match=r"a.jsonl:2: id 'q1' is not in the input"):
        answer_file(FakeRuntime(), questions, output)


# ---------------------------------------------------------------------------------------------------------- models
def test_nothing_left_to_answer_loads_no_model(files):
    questions, output = files
    first = FakeRuntime()
    answer_file(first, questions, output, method="no_rag")
    assert first.built == ["no_rag"]
    again = FakeRuntime()
    done = answer_file(again, questions, output, method="no_rag")
    assert (done.answered, done.skipped) == (0, 4) and again.built == [] and again.calls == []


def test_method_is_resolved_and_checked_without_building(files):
    questions, output = files
    unknown = FakeRuntime()
    with pytest.raises(ConfigError, match="method 'oracle' is not in this bundle"):
        answer_file(unknown, questions, output, method="oracle")
    assert unknown.built == [] and not output.exists()
    default = FakeRuntime(methods=("no_rag", "d2rag"))
    answer_file(default, questions, output)
    assert default.built == ["d2rag"] and {r["method"] for r in rows(output)} == {"d2rag"}
    first = FakeRuntime(methods=("no_rag", "dtr"))
    answer_file(first, questions, output.with_name("b.jsonl"))
    assert first.built == ["no_rag"]


# ---------------------------------------------------------------------------------------------------------- kills
def test_answers_are_written_per_question(files):
    questions, output = files
    runtime = FakeRuntime(output=output)
    answer_file(runtime, questions, output)
    assert runtime.calls == [["Question 0?"], ["Question 1?"], ["Question 2?"], ["Question 3?"]]
    assert runtime.rows_before_call == [0, 1, 2, 3] and runtime.sizes == [1, 1, 1, 1]
    batched = FakeRuntime(output=output.with_name("b.jsonl"))
    answer_file(batched, questions, output.with_name("b.jsonl"), batch_size=3)  # opting in to shared batches
    assert [len(c) for c in batched.calls] == [3, 1] and batched.rows_before_call == [0, 3]


def test_an_interrupt_loses_only_the_question_in_flight(files):
    questions, output = files
    with pytest.raises(KeyboardInterrupt):
        answer_file(FakeRuntime(fail_on="Question 2?"), questions, output)
    assert [r["id"] for r in rows(output)] == ["q0", "q1"]
    again = FakeRuntime()
    done = answer_file(again, questions, output)
    assert (done.answered, done.skipped) == (2, 2) and again.calls == [["Question 2?"], ["Question 3?"]]
    assert [r["id"] for r in rows(output)] == ["q0", "q1", "q2", "q3"]


KILLED = """
import os, sys
from types import SimpleNamespace
from workbench.runtime.batch_file import answer_file
from workbench.runtime.runtime import RuntimeAnswer

class Killed:
    name, version, methods = "fake", "1.0.0", ("no_rag", "d2rag")
    def method(self, name=None):
        return SimpleNamespace(name=name)
    def answer_many(self, questions, method=None, batch_size=None):
        if "Question 2?" in questions:
            os._exit(9)  # killed with question 2 in flight: no cleanup, no flush
        return [RuntimeAnswer(question=q, method=method, text="A", retrieved=False, decoding="-") for q in questions]

answer_file(Killed(), sys.argv[1], sys.argv[2])
"""


def test_a_killed_process_resumes_without_loss_or_duplicate(files, tmp_path):
    questions, output = files
    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent(KILLED))
    package_root = str(Path(workbench.__file__).parents[1])  # the child imports the workbench under test
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    killed = subprocess.run([sys.executable, str(script), str(questions), str(output)], env=env, timeout=120)
    assert killed.returncode == 9 and [r["id"] for r in rows(output)] == ["q0", "q1"]
    again = FakeRuntime()
    done = answer_file(again, questions, output)
    assert (done.answered, done.skipped) == (2, 2)
    assert [r["id"] for r in rows(output)] == ["q0", "q1", "q2", "q3"]


def test_a_row_cut_short_is_answered_again_but_a_foreign_tail_is_never_cut(files):
    questions, output = files
    answer_file(FakeRuntime(), questions, output)
    lines = output.read_bytes().split(b"\n")
    output.write_bytes(b"\n".join(lines[:2]) + b"\n" + lines[2][:9])  # killed while writing the third row
    done = answer_file(FakeRuntime(), questions, output)
    assert (done.answered, done.skipped) == (2, 2) and [r["id"] for r in rows(output)] == ["q0", "q1", "q2", "q3"]
    foreign = output.with_name("notes.txt")
    foreign.write_bytes(b"my notes, no newline")
    with pytest.raises(DataError, match=r"notes.txt:1: an unterminated line that is no answer row"):
        answer_file(FakeRuntime(), questions, foreign)
    assert foreign.read_bytes() == b"my notes, no newline"


# ---------------------------------------------------------------------------------------------------------- CLI
def run_cli(monkeypatch, capsys, runtime: FakeRuntime, *args: str) -> tuple[int, str, str]:
    """``workbench infer --bundle B *args`` through the console entry point, with ``runtime`` as the bundle."""
    from workbench import cli

    monkeypatch.setattr("workbench.runtime.load_bundle", lambda path, overrides=None: runtime)
    monkeypatch.setattr(sys, "argv", ["workbench", "infer", "--bundle", "B", *args])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    out = capsys.readouterr()
    return int(exit_.value.code or 0), out.out, out.err


def test_cli_refusal_is_one_error_line_with_exit_2(files, monkeypatch, capsys):
    questions, output = files
    args = ("--input", str(questions), "--output", str(output))
    first = FakeRuntime()
    code, out, _ = run_cli(monkeypatch, capsys, first, *args, "--method", "no_rag")
    assert code == 0 and "4 answered, 0 already" in out and "(no_rag)" in out and first.sizes == [1, 1, 1, 1]
    second = FakeRuntime()
    code, _, err = run_cli(monkeypatch, capsys, second, *args, "--method", "d2rag")
    assert code == 2 and len(err.strip().splitlines()) == 1 and second.built == []
    assert err.startswith(f"error: {output}:1: id 'q0' was answered by 'fake' '1.0.0' with 'no_rag'")
    code, _, err = run_cli(monkeypatch, capsys, FakeRuntime(), *args, "--method", "oracle")
    assert code == 2 and err.strip() == "error: method: method 'oracle' is not in this bundle (has: no_rag, d2rag)"


def test_cli_json_answer_is_one_line(monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, FakeRuntime(), "--json", f"why{ODD}?")
    assert code == 0 and len(out.splitlines()) == 1 and json.loads(out)["text"] == f"A: why{ODD}?"
