"""Answer a JSONL file of questions into a JSONL file of answers, resuming anything an earlier run wrote.

Lines, both ways, end at ``\\n`` and nowhere else (a trailing ``\\r`` is dropped): :meth:`str.splitlines` would also
split on U+2028, U+2029, U+0085 and a few control characters, which a question or an answer may hold. Every line is
decoded as strict UTF-8; a line that is not is refused as one error naming ``file:line``.

Files: ``--input`` and ``--output`` must be regular files (an absent output is created): a FIFO, a device such as
``/dev/zero`` or ``/dev/full``, a directory or a socket is refused in one line saying what it is, before anything is
read or written. An input line may hold at most :data:`MAX_INPUT_LINE_BYTES` bytes and an output row
:data:`MAX_ROW_BYTES` (a longer line is refused naming ``file:line``), so a file with no newline is never read whole.
While a run reads and appends to its output it holds an exclusive lock on it (``flock``): a second ``workbench infer``
on the same output is refused in one line naming the file, instead of interleaving its rows with the first's.

Input: one JSON object per line with a string ``question`` and an optional ``id`` (a string of at most
:data:`MAX_ID_CHARS` characters or an integer within ±(2**63 - 1); default the line number). Lines are parsed by the
strict parser bundles are read with (:func:`~workbench.core.strict_json.loads_strict`): a duplicate key, NaN or
Infinity is refused, not resolved. Only ``id`` and ``question`` are read — any other field (a gold answer, say) is
ignored and never reaches a method. A malformed line, a missing question, a question the runtime would refuse
(:func:`~workbench.runtime.questions.question_problem`: blank — only spaces or zero-width characters — or not valid
Unicode, a lone surrogate) or a repeated id is a one-line error naming ``file:line``.

Output: one JSON object per answer::

    {"id", "question", "question_sha256", "bundle", "bundle_version", "method", "answer", ...}

then the other fields of :class:`~workbench.runtime.runtime.RuntimeAnswer` (the full trace only with
``traces=True``). ``question_sha256`` is the sha256 of the question's UTF-8 bytes. U+2028, U+2029, U+0085 and lone
surrogates are written as ``\\uXXXX`` escapes, so a row is exactly one line for any reader and always valid UTF-8.

Writing is per question: each row is appended and fsynced as soon as its question is answered; when the machine
refuses a row (a full disk, a read-only file system) the file is cut back to its last whole row and the run stops
with one line saying why. With the default ``batch_size=1`` one question is in flight at a time, so a kill loses at
most that question. A larger
``batch_size`` lets the methods that batch (No-RAG, Standard RAG, DTR, D²-RAG, InSemRAG's rounds) share forward
passes across questions, but the whole batch is then in flight: a kill loses at most ``batch_size`` questions (rows
of a batch are still written one by one as soon as the batch returns).

Resuming: every row already in the output is read and checked before anything is answered. A row written by
another bundle, bundle version or method, a row whose id is not in the input or whose question hash differs from
the input's question for that id, a repeated id, a row in an older format (no ``bundle`` / ``method`` /
``question_sha256``) or a line that is not such a row is refused as one line naming ``file:line`` — the way out is
another ``--output`` (or the same bundle and method). A last line cut short by an interruption (a prefix of a row,
after the last ``\\n``) is dropped and its question answered again; any other unterminated tail is refused, never
cut. When nothing is left to answer, no model is loaded (:meth:`Runtime.method` is never called).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from workbench.core.errors import ConfigError, DataError, storage_error
from workbench.core.logs import track
from workbench.core.regular_files import lock_exclusive, open_regular
from workbench.core.strict_json import loads_strict
from workbench.runtime.questions import question_problem

ROW_START = b'{"id": '
"""How every row :func:`answer_file` writes begins (``id`` is its first key): an unterminated tail that is a prefix
of a row is an interrupted write; anything else after the last newline was not written by us and is never cut."""

PROVENANCE_KEYS = ("bundle", "bundle_version", "method", "question_sha256")
"""The keys every row carries so a resume can tell whose answer it is and to which question."""

MAX_INPUT_LINE_BYTES = 1024 * 1024
"""Longest input line accepted, in bytes without its newline (a question and whatever other fields its row holds)."""
MAX_ROW_BYTES = 64 * 1024 * 1024
"""Longest output row read back when resuming, in bytes (rows with ``--traces`` hold whole traces)."""
MAX_ID_CHARS = 256
"""Longest ``id`` accepted, in characters; an integer id must lie within ±(2**63 - 1)."""
MAX_INT_ID = 2**63 - 1

# Characters json.dumps(ensure_ascii=False) leaves raw that would break "one row = one line" for a reader using
# str.splitlines (U+0085, U+2028, U+2029) or make the line invalid UTF-8 (lone surrogates, which json.loads accepts
# from a "\ud800" escape). Inside a JSON string each one may be written as a \uXXXX escape, which reads back the same.
_UNSAFE = re.compile("[\u0085\u2028\u2029\ud800-\udfff]")


@dataclass
class FileRun:
    """What :func:`answer_file` did: questions in the input, already answered before, answered now, where, and
    with which method."""

    total: int
    skipped: int
    answered: int
    output: Path
    method: str


@dataclass(frozen=True)
class Provenance:
    """Who answers: the bundle's name and version and the method; each output row carries the three."""

    bundle: str
    bundle_version: str
    method: str


# ---------------------------------------------------------------------------------------------------------- lines
def _raw_lines(handle: BinaryIO, path: Path, limit: int) -> Iterator[tuple[int, bytes, bool]]:
    """``(line number, bytes, terminated)`` of each line of ``handle`` read from its current position, without its
    ``\\n``; a last line with no ``\\n`` has ``terminated`` False. Reads at most ``limit + 1`` bytes a line: DataError
    naming ``file:line`` for a line of more than ``limit`` bytes."""
    number = 0
    while raw := handle.readline(limit + 1):
        number += 1
        terminated = raw.endswith(b"\n")
        if not terminated and len(raw) > limit:
            raise DataError(f"a line longer than {limit} bytes", f"{path}:{number}")
        yield number, raw[:-1] if terminated else raw, terminated


def _text(raw: bytes, number: int, path: Path) -> str:
    """One line as text: strict UTF-8, a trailing ``\\r`` dropped, and a byte-order mark before the first line (as some
    editors write) too; DataError naming ``file:line`` for bytes that are not valid UTF-8."""
    if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8").removesuffix("\r")
    except UnicodeDecodeError as exc:
        what = f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
        raise DataError(what, f"{path}:{number}") from None


def question_sha256(question: str) -> str:
    """The sha256 (hex) of ``question``'s UTF-8 bytes: what a row's ``question_sha256`` holds."""
    # surrogatepass: the input refuses lone surrogates, but hashing must never be the step that raises
    return hashlib.sha256(question.encode("utf-8", "surrogatepass")).hexdigest()


def json_line(value: Any) -> str:
    """``value`` as JSON on one line that every line splitter keeps whole and that encodes as valid UTF-8
    (``_UNSAFE`` characters escaped; every other non-ASCII character kept readable)."""
    text = json.dumps(value, ensure_ascii=False)
    return _UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def dump_row(row: dict[str, Any]) -> bytes:
    """One output row as one ``\\n``-terminated line of valid UTF-8 (see :func:`json_line`)."""
    return (json_line(row) + "\n").encode("utf-8")


# ---------------------------------------------------------------------------------------------------------- input
def read_questions(path: str | Path) -> list[tuple[str, str]]:
    """``[(id, question)]`` from a JSONL file (see the module docstring); DataError naming ``file:line``, or the file
    when it is missing or not a regular file; StorageError when the machine refuses to read it."""
    path = Path(path)
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    with open_regular(path, "input") as handle:
        try:
            for number, raw, _ in _raw_lines(handle, path, MAX_INPUT_LINE_BYTES):
                line = _text(raw, number, path)
                if not line.strip():
                    continue
                qid, question = _question(line, number, f"{path}:{number}")
                if qid in seen:
                    raise DataError(f"id {qid!r} appears twice", f"{path}:{number}")
                seen.add(qid)
                out.append((qid, question))
        except OSError as exc:
            raise storage_error(exc, str(path), "cannot read the input") from None
    if not out:
        raise DataError("the input holds no questions", str(path))
    return out


def _question(line: str, number: int, where: str) -> tuple[str, str]:
    """``(id, question)`` of one input line; DataError naming ``where`` when it is not a valid question line."""
    row = loads_strict(line, where)
    if not isinstance(row, dict):
        raise DataError("each line must be a JSON object with a 'question'", where)
    if "question" not in row:
        raise DataError("no 'question': each line must be a JSON object with a 'question'", where)
    question = row["question"]
    problem = question_problem(question)  # the runtime's own check, here so the refusal names file:line
    if problem is not None:
        raise DataError(f"'question' {problem}", where)
    raw_id = row.get("id", number)
    if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
        raise DataError(f"'id' must be a string or an integer, got {type(raw_id).__name__}", where)
    if isinstance(raw_id, int) and abs(raw_id) > MAX_INT_ID:
        raise DataError("'id' is an integer beyond ±(2**63 - 1): use a smaller one, or a string", where)
    if len(qid := str(raw_id)) > MAX_ID_CHARS:
        raise DataError(f"'id' is longer than {MAX_ID_CHARS} characters", where)
    return qid, question


# ---------------------------------------------------------------------------------------------------------- output
def _way_out(who: Provenance) -> str:
    return f"use another --output, or the bundle and method that wrote it (this run: {_describe(who)})"


def _describe(who: Provenance) -> str:
    return f"{who.bundle!r} {who.bundle_version!r} with {who.method!r}"


def _open_output(output: Path) -> tuple[BinaryIO, bool]:
    """``(handle, created)``: ``output`` opened to read and append (created when absent, with its folder) and
    locked for this process alone; DataError when another process holds it, or it is not a regular file."""
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise storage_error(exc, str(output), "cannot create the output's folder") from None
    existed = output.exists()
    handle = open_regular(output, "output", append=True)
    try:
        busy = "another `workbench infer` is writing this output: wait for it to end, or use another --output"
        lock_exclusive(handle, str(output), busy)
    except BaseException:
        handle.close()
        raise
    return handle, not existed


def _done_ids(handle: BinaryIO, output: Path, questions: dict[str, str], who: Provenance) -> set[str]:
    """Ids already answered in ``output`` (open as ``handle``, locked), each row checked against this run (see the
    module docstring); an unterminated tail that is a prefix of a row (an interrupted write) is cut off the file."""
    done: set[str] = set()
    keep = 0  # the end of the last whole row: what follows is an unfinished line
    tail = b""
    try:
        handle.seek(0)
        for number, raw, terminated in _raw_lines(handle, output, MAX_ROW_BYTES):
            if not terminated:
                tail = raw
                break
            keep += len(raw) + 1
            line = _text(raw, number, output)
            if line.strip():
                qid = _check_row(line, f"{output}:{number}", questions, who)
                if qid in done:
                    raise DataError(f"id {qid!r} appears twice: {_way_out(who)}", f"{output}:{number}")
                done.add(qid)
        if tail:
            # only a prefix of one of our rows is ours to cut; checked after every full row, so a foreign file is
            # refused by its first line before a byte of it changes
            if not (tail.startswith(ROW_START) or ROW_START.startswith(tail)):
                where = f"{output}:{number}"
                raise DataError(f"an unterminated line that is no answer row: {_way_out(who)}", where)
            os.ftruncate(handle.fileno(), keep)
    except OSError as exc:
        raise storage_error(exc, str(output), "cannot read or cut the output") from None
    return done


def _check_row(line: str, where: str, questions: dict[str, str], who: Provenance) -> str:
    """The id of one output row, after checking it was written by this bundle and method for this input's
    question; DataError naming ``where`` (one line, with the way out) otherwise."""
    # strict but for NaN / Infinity, which json.dumps writes for a float answer field that holds one
    row = loads_strict(line, where, allow_nan=True)
    if not isinstance(row, dict) or not isinstance(row.get("id"), str):
        raise DataError(f"not an answer row written by `workbench infer`: {_way_out(who)}", where)
    missing = [key for key in PROVENANCE_KEYS if not isinstance(row.get(key), str)]
    if missing:
        what = f"a row from an older `workbench infer` or another tool (no {', '.join(missing)})"
        raise DataError(f"{what}: {_way_out(who)}", where)
    qid = row["id"]
    wrote = Provenance(row["bundle"], row["bundle_version"], row["method"])
    if wrote != who:
        raise DataError(f"id {qid!r} was answered by {_describe(wrote)}: {_way_out(who)}", where)
    if qid not in questions:
        raise DataError(f"id {qid!r} is not in the input: use another --output for another input", where)
    if row["question_sha256"] != question_sha256(questions[qid]):
        what = f"id {qid!r} was answered for another question (the input changed since)"
        raise DataError(f"{what}: use another --output, or restore the input", where)
    return qid


# ---------------------------------------------------------------------------------------------------------- answering
def resolve_method(runtime: Any, method: str | None) -> str:
    """The method name a run uses — ``method``, or the registry's default of the bundle's methods
    (:func:`~workbench.methods.registry.default_method`) — checked against ``runtime.methods`` without building
    anything (ConfigError for a method the bundle lacks)."""
    from workbench.methods.registry import default_method

    methods = tuple(runtime.methods)
    name = method or default_method(methods)
    if name not in methods:
        raise ConfigError(f"method {name!r} is not in this bundle (has: {', '.join(methods)})", "method")
    return name


def _answers(
    runtime: Any, todo: list[tuple[str, str]], method: str, batch_size: int
) -> Iterator[tuple[tuple[str, str], Any]]:
    """``((id, question), answer)`` for each question of ``todo``, asked ``batch_size`` at a time; lazy, so the
    caller writes each answer before the next batch is asked."""
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        answers = runtime.answer_many([question for _, question in batch], method, batch_size=batch_size)
        yield from zip(batch, answers, strict=True)


def answer_file(
    runtime: Any,
    input_path: str | Path,
    output_path: str | Path,
    *,
    method: str | None = None,
    batch_size: int = 1,
    traces: bool = False,
) -> FileRun:
    """Answer every question of ``input_path`` not yet in ``output_path`` (see the module docstring).

    ``runtime`` needs ``name``, ``version``, ``methods``, ``method(name)`` (builds the models) and
    ``answer_many(questions, method, batch_size=)``. Everything is checked — the method, the input, every row
    already written — before ``runtime.method`` is called, and it is not called at all when nothing is left.
    """

    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}", "batch_size")
    who = Provenance(str(runtime.name), str(runtime.version), resolve_method(runtime, method))
    questions = read_questions(input_path)
    output = Path(output_path)
    handle, created = _open_output(output)  # locked from before its rows are read until the last one is written
    with handle:
        try:
            done = _done_ids(handle, output, dict(questions), who)
            todo = [(qid, q) for qid, q in questions if qid not in done]
            if todo:
                runtime.method(who.method)  # builds the models now: a failure to load comes before the progress bar
                answered = _answers(runtime, todo, who.method, batch_size)
                for (qid, question), answer in track(answered, f"infer ({who.method})", total=len(todo)):
                    _append(handle.fileno(), _row(qid, question, answer, who, traces), output)
        except BaseException:
            if created and os.fstat(handle.fileno()).st_size == 0:
                with contextlib.suppress(OSError):
                    output.unlink()  # refused before a row was written: leave no empty file behind
            raise
    return FileRun(len(questions), len(questions) - len(todo), len(todo), output, who.method)


def _append(fd: int, line: bytes, output: Path) -> None:
    """Append one row and make it durable before the next question starts (a kill then loses no written row).

    When the machine refuses it (a full disk, a read-only file system), the file is cut back to where the row began,
    so it never ends in half a row, and a one-line StorageError names the output."""
    start = os.lseek(fd, 0, os.SEEK_END)
    try:
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
        raise storage_error(exc, str(output), "cannot write an answer row") from None


def _row(qid: str, question: str, answer: Any, who: Provenance, traces: bool) -> bytes:
    """The output line for one answer: id, the input's question and its hash, who answered, then the answer."""
    row = answer.to_dict()
    if not traces:
        row.pop("trace", None)
    for key in ("question", "method"):
        row.pop(key, None)  # the input's exact question and the resolved method name are written instead
    head = {"id": qid, "question": question, "question_sha256": question_sha256(question)}
    return dump_row(
        {
            **head,
            "bundle": who.bundle,
            "bundle_version": who.bundle_version,
            "method": who.method,
            "answer": row.pop("text"),
            **row,
        }
    )
