"""`workbench infer --input/--output` against hostile files (issue 41): one writer per output, regular files only,
bounded lines, strict JSON rows, bounded ids, and a refused write that leaves no half row.

Each test fails without its fix: two processes interleaved their rows in one output (79 rows for 40 ids), ``/dev/zero``
as input grew without bound, a FIFO blocked forever, a duplicate key was last-wins, a 5,000-digit id was a traceback,
and a full disk was a traceback with half a row left in the file.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import workbench
from tests.unit.runtime.test_batch_file_resume import FakeRuntime, rows, run_cli, write_questions
from workbench.core.errors import DataError, StorageError
from workbench.runtime import batch_file
from workbench.runtime.batch_file import MAX_ID_CHARS, MAX_INPUT_LINE_BYTES, answer_file, read_questions

BUSY = "another `workbench infer` is writing this output"


@pytest.fixture
def files(tmp_path):
    questions = write_questions(tmp_path / "q.jsonl", [f"Question {i}?" for i in range(4)])
    return questions, tmp_path / "out" / "a.jsonl"


def finishes(call, seconds: float = 20.0):
    """``call()``'s exception (or None) when it returns within ``seconds``; fails the test when it blocks."""
    outcome: list[BaseException | None] = []

    def target():
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # handed back to the test
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)  # a blocked open would keep it forever: daemon
    thread.start()
    thread.join(seconds)
    assert outcome, f"blocked for {seconds} s"
    return outcome[0]


# ---------------------------------------------------------------------------------------------------- one writer
def test_an_output_another_process_holds_is_refused_and_left_alone(files):
    questions, output = files
    answer_file(FakeRuntime(), questions, output)
    lines = output.read_bytes().split(b"\n")
    output.write_bytes(b"\n".join(lines[:2]) + b"\n")  # two rows left to answer
    before = output.read_bytes()
    with open(output, "rb") as other:  # another open file description: as another process's
        fcntl.flock(other.fileno(), fcntl.LOCK_EX)
        runtime = FakeRuntime()
        with pytest.raises(DataError) as err:
            answer_file(runtime, questions, output)
        assert str(err.value).startswith(f"{output}: {BUSY}") and "\n" not in str(err.value)
        assert runtime.built == [] and output.read_bytes() == before
    done = answer_file(FakeRuntime(), questions, output)  # the lock went with its holder
    assert (done.answered, done.skipped) == (2, 2)


SLOW = """
import sys, time
from pathlib import Path
from tests.unit.runtime.test_batch_file_resume import FakeRuntime
from workbench.runtime.batch_file import answer_file

class Slow(FakeRuntime):
    def answer_many(self, questions, method=None, batch_size=None):
        Path(sys.argv[3]).touch()  # answering: the other process may start now
        time.sleep(0.3)
        return super().answer_many(questions, method, batch_size)

answer_file(Slow(), sys.argv[1], sys.argv[2])
"""


def test_two_processes_on_one_output_never_interleave(files, tmp_path):
    questions, output = files
    script, started = tmp_path / "slow.py", tmp_path / "started"
    script.write_text(textwrap.dedent(SLOW))
    package_root = str(Path(workbench.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    first = subprocess.Popen([sys.executable, str(script), str(questions), str(output), str(started)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert first.poll() is None and time.monotonic() < deadline, "the first process never started answering"
            time.sleep(0.02)
        second = FakeRuntime()
        with pytest.raises(DataError, match=BUSY.replace("`", ".")):
            answer_file(second, questions, output)
        assert second.built == [] and second.calls == []
    finally:
        assert first.wait(timeout=60) == 0
    assert [r["id"] for r in rows(output)] == ["q0", "q1", "q2", "q3"]  # each id once, in order
    again = answer_file(FakeRuntime(), questions, output)
    assert (again.answered, again.skipped) == (0, 4)


def test_cli_refuses_a_held_output_in_one_line(files, monkeypatch, capsys):
    questions, output = files
    output.parent.mkdir()
    output.touch()
    with open(output, "rb") as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_EX)
        code, _, err = run_cli(monkeypatch, capsys, FakeRuntime(), "--input", str(questions), "--output", str(output))
    assert code == 2 and err.strip().splitlines() == [
        f"error: {output}: {BUSY}: wait for it to end, or use another --output"
    ]


# ---------------------------------------------------------------------------------------------- regular files only
@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: os.mkfifo(p), "is a FIFO (named pipe), not a regular file"),
        (lambda p: p.symlink_to("/dev/zero"), "is a character device, not a regular file"),
        (lambda p: p.mkdir(), "is a directory, not a regular file"),
    ],
)
def test_an_input_that_is_not_a_regular_file_is_refused_without_reading(tmp_path, make, expected):
    path = tmp_path / "q.jsonl"
    make(path)
    error = finishes(lambda: read_questions(path))
    assert isinstance(error, DataError) and str(error) == f"{path}: {expected}", error


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: os.mkfifo(p), "is a FIFO (named pipe), not a regular file"),
        (lambda p: p.symlink_to("/dev/full"), "is a character device, not a regular file"),
        (lambda p: p.symlink_to("/dev/null"), "is a character device, not a regular file"),
    ],
)
def test_an_output_that_is_not_a_regular_file_is_refused_before_any_model(files, make, expected):
    questions, output = files
    output.parent.mkdir()
    make(output)
    runtime = FakeRuntime()
    error = finishes(lambda: answer_file(runtime, questions, output))
    assert isinstance(error, DataError) and str(error) == f"{output}: {expected}", error
    assert runtime.built == []


def test_a_missing_input_says_so_and_a_link_to_a_regular_file_is_fine(tmp_path):
    with pytest.raises(DataError, match="no such input file"):
        read_questions(tmp_path / "nope.jsonl")
    real = write_questions(tmp_path / "real.jsonl", ["Fine?"])
    (tmp_path / "link.jsonl").symlink_to(real)
    assert read_questions(tmp_path / "link.jsonl") == [("q0", "Fine?")]


# ---------------------------------------------------------------------------------------------------- bounded lines
def test_an_input_line_longer_than_the_bound_is_refused_naming_its_line(tmp_path):
    path = tmp_path / "q.jsonl"
    padding = "x" * (MAX_INPUT_LINE_BYTES - len('{"question": "fine?", "pad": ""}'))
    at_bound = json.dumps({"question": "fine?", "pad": padding}, separators=(", ", ": "))
    assert len(at_bound) == MAX_INPUT_LINE_BYTES
    path.write_text(at_bound + "\n" + at_bound + "x" * 10)  # the second one byte-bound plus ten, and no newline
    with pytest.raises(DataError) as err:
        read_questions(path)
    assert str(err.value) == f"{path}:2: a line longer than {MAX_INPUT_LINE_BYTES} bytes"
    path.write_text(at_bound + "\n")
    assert read_questions(path) == [("1", "fine?")]


def test_a_newline_free_input_is_read_only_up_to_the_bound(tmp_path, monkeypatch):
    path = tmp_path / "q.jsonl"
    path.write_bytes(b"{" * (4 * MAX_INPUT_LINE_BYTES))
    asked: list[int] = []
    real = batch_file._raw_lines

    class Counted:
        """The input handle, recording the size of each read."""

        def __init__(self, handle):
            self.handle = handle

        def readline(self, size=-1):
            asked.append(size)
            return self.handle.readline(size)

    monkeypatch.setattr(batch_file, "_raw_lines", lambda handle, where, limit: real(Counted(handle), where, limit))
    with pytest.raises(DataError, match=r"q\.jsonl:1: a line longer than"):
        read_questions(path)
    assert asked == [MAX_INPUT_LINE_BYTES + 1]  # one bounded read, never the 4 MiB


def test_an_output_row_longer_than_its_bound_is_refused(files, monkeypatch):
    questions, output = files
    answer_file(FakeRuntime(), questions, output)
    monkeypatch.setattr(batch_file, "MAX_ROW_BYTES", 100)
    with pytest.raises(DataError, match=r"a.jsonl:1: a line longer than 100 bytes"):
        answer_file(FakeRuntime(), questions, output)


# ------------------------------------------------------------------------------------------------ strict JSON rows
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"question": "asked?", "question": "answered?"}', "not accepted as JSON: duplicate key 'question'"),
        ('{"id": "a", "id": "b", "question": "q?"}', "not accepted as JSON: duplicate key 'id'"),
        ('{"question": "q?", "score": NaN}', "not accepted as JSON: NaN is not a JSON number"),
        ('{"id": ' + "9" * 5000 + ', "question": "q?"}', "not accepted as JSON: an integer of more than 40 digits"),
        ('{"id": 123456789012345678901234567890, "question": "q?"}', "'id' is an integer beyond ±(2**63 - 1)"),
        ('{"id": "' + "i" * (MAX_ID_CHARS + 1) + '", "question": "q?"}', f"'id' is longer than {MAX_ID_CHARS}"),
        ('{"id": ["x"], "question": "q?"}', "'id' must be a string or an integer, got list"),
    ],
)
def test_input_rows_are_strict_json_with_bounded_ids(tmp_path, line, expected):
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "fine?"}\n' + line + "\n")
    with pytest.raises(DataError) as err:
        read_questions(path)
    message = str(err.value)
    assert message.startswith(f"{path}:2: {expected}") and "\n" not in message, message
    assert "99999" not in message and "iiiii" not in message  # the value read is never echoed


def test_ids_at_their_bounds_are_accepted(tmp_path):
    path = tmp_path / "q.jsonl"
    lines = [
        {"id": 2**63 - 1, "question": "a?"},
        {"id": -(2**63 - 1), "question": "b?"},
        {"id": "i" * MAX_ID_CHARS, "question": "c?"},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in lines))
    assert [qid for qid, _ in read_questions(path)] == [str(2**63 - 1), str(-(2**63 - 1)), "i" * MAX_ID_CHARS]


def test_a_nan_in_a_row_written_by_infer_still_resumes(files):
    questions, output = files
    runtime = FakeRuntime()
    answer_many = runtime.answer_many

    def with_nan(qs, method=None, batch_size=None):
        answers = answer_many(qs, method, batch_size)
        for answer in answers:
            answer.p_correct = float("nan")  # json.dumps writes NaN: our own rows may hold it
        return answers

    runtime.answer_many = with_nan
    answer_file(runtime, questions, output)
    assert b"NaN" in output.read_bytes()
    assert answer_file(FakeRuntime(), questions, output).skipped == 4


# ----------------------------------------------------------------------------------------- refused writes
def _fail_on_row(monkeypatch, output: Path, row: int, *, half: bool) -> None:
    """Make the ``row``-th append to ``output`` fail with ENOSPC (``half``: after writing half of it, as a disk that
    fills mid-write; else at fsync)."""
    real_write, real_fsync = os.write, os.fsync
    calls = {"write": 0}

    def ours(fd: int) -> bool:
        return os.path.samestat(os.fstat(fd), os.stat(output))

    def write(fd, data):
        if ours(fd):
            calls["write"] += 1
            if half and calls["write"] == row:
                real_write(fd, bytes(data[: len(data) // 2]))
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    def fsync(fd):
        if not half and ours(fd) and calls["write"] == row:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("half", [True, False])
def test_a_full_disk_leaves_whole_rows_only_and_resumes(files, monkeypatch, half):
    questions, output = files
    output.parent.mkdir()
    output.touch()
    _fail_on_row(monkeypatch, output, 3, half=half)
    with pytest.raises(StorageError) as err:
        answer_file(FakeRuntime(), questions, output)
    assert str(err.value) == f"{output}: cannot write an answer row: no space left on device (ENOSPC)"
    assert output.read_bytes().endswith(b"\n") and [r["id"] for r in rows(output)] == ["q0", "q1"]
    monkeypatch.undo()
    done = answer_file(FakeRuntime(), questions, output)
    assert (done.answered, done.skipped) == (2, 2)
    assert [r["id"] for r in rows(output)] == ["q0", "q1", "q2", "q3"]


def test_a_full_disk_is_one_line_from_the_cli(files, monkeypatch, capsys):
    questions, output = files
    output.parent.mkdir()
    output.touch()
    _fail_on_row(monkeypatch, output, 1, half=True)
    code, _, err = run_cli(monkeypatch, capsys, FakeRuntime(), "--input", str(questions), "--output", str(output))
    assert code == 2 and err.strip().splitlines() == [
        f"error: {output}: cannot write an answer row: no space left on device (ENOSPC)"
    ]
    assert output.read_bytes() == b""


def test_a_read_only_output_folder_is_one_line_and_leaves_nothing(files, monkeypatch):
    questions, output = files
    real_open = os.open

    def read_only(path, flags, mode=0o777, *, dir_fd=None):
        if os.fspath(path) == str(output) and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", read_only)
    runtime = FakeRuntime()
    with pytest.raises(StorageError) as err:
        answer_file(runtime, questions, output)
    assert str(err.value) == f"{output}: cannot open the output: read-only file system (EROFS)"
    assert runtime.built == [] and not output.exists()


def test_a_model_that_fails_to_load_leaves_no_empty_output(files):
    questions, output = files
    runtime = FakeRuntime()

    def broken(name=None):
        raise DataError("the generator's weights are corrupt", "generator")

    runtime.method = broken
    with pytest.raises(DataError, match="corrupt"):
        answer_file(runtime, questions, output)
    assert not output.exists()
