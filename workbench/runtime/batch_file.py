"""Answer a JSONL file of questions into a JSONL file of answers, resuming anything an earlier run wrote.

Lines, both ways, end at ``\\n`` and nowhere else (a trailing ``\\r`` is dropped): :meth:`str.splitlines` would also
split on U+2028, U+2029, U+0085 and a few control characters, which a question or an answer may hold. Every line is
decoded as strict UTF-8; a line that is not is refused as one error naming ``file:line``.

Input: one JSON object per line with a string ``question`` and an optional ``id`` (string or integer; default the
line number). Only ``id`` and ``question`` are read — any other field (a gold answer, say) is ignored and never
reaches a method. A malformed line, a missing question, a question the runtime would refuse
(:func:`~workbench.runtime.questions.question_problem`: blank — only spaces or zero-width characters — or not valid
Unicode, a lone surrogate) or a repeated id is a one-line error naming ``file:line``.

Output: one JSON object per answer::

    {"id", "question", "question_sha256", "bundle", "bundle_version", "method", "answer", ...}

then the other fields of :class:`~workbench.runtime.runtime.RuntimeAnswer` (the full trace only with
``traces=True``). ``question_sha256`` is the sha256 of the question's UTF-8 bytes. U+2028, U+2029, U+0085 and lone
surrogates are written as ``\\uXXXX`` escapes, so a row is exactly one line for any reader and always valid UTF-8.

Writing is per question: each row is appended, flushed and fsynced as soon as its question is answered. With the
default ``batch_size=1`` one question is in flight at a time, so a kill loses at most that question. A larger
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

import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.core.errors import ConfigError, DataError
from workbench.runtime.questions import question_problem

ROW_START = b'{"id": '
"""How every row :func:`answer_file` writes begins (``id`` is its first key): an unterminated tail that is a prefix
of a row is an interrupted write; anything else after the last newline was not written by us and is never cut."""

PROVENANCE_KEYS = ("bundle", "bundle_version", "method", "question_sha256")
"""The keys every row carries so a resume can tell whose answer it is and to which question."""

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
def _lines(data: bytes, path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each ``\\n``-terminated or final line of ``data`` (a trailing ``\\r`` dropped),
    decoded as strict UTF-8; DataError naming ``file:line`` for a line that is not valid UTF-8."""
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]  # a UTF-8 byte-order mark, as some editors write: not part of the first line's JSON
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            what = f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
            raise DataError(what, f"{path}:{number}") from None
        yield number, text.removesuffix("\r")


def _parse(line: str, where: str) -> Any:
    """``json.loads(line)``; DataError naming ``where`` when it is not JSON (or nests too deep to parse)."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"not a JSON object ({exc.msg})", where) from None
    except RecursionError:
        raise DataError("not a JSON object (nested too deeply)", where) from None


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
    """``[(id, question)]`` from a JSONL file (see the module docstring); DataError naming ``file:line``."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError("input file not found", str(path)) from None
    except OSError as exc:
        raise DataError(f"cannot read the input ({type(exc).__name__})", str(path)) from None
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for number, line in _lines(data, path):
        if not line.strip():
            continue
        qid, question = _question(line, number, f"{path}:{number}")
        if qid in seen:
            raise DataError(f"id {qid!r} appears twice", f"{path}:{number}")
        seen.add(qid)
        out.append((qid, question))
    if not out:
        raise DataError("the input holds no questions", str(path))
    return out


def _question(line: str, number: int, where: str) -> tuple[str, str]:
    """``(id, question)`` of one input line; DataError naming ``where`` when it is not a valid question line."""
    row = _parse(line, where)
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
        raise DataError(f"'id' must be a string or an integer, got {raw_id!r}", where)
    return str(raw_id), question


# ---------------------------------------------------------------------------------------------------------- output
def _way_out(who: Provenance) -> str:
    return f"use another --output, or the bundle and method that wrote it (this run: {_describe(who)})"


def _describe(who: Provenance) -> str:
    return f"{who.bundle!r} {who.bundle_version!r} with {who.method!r}"


def _done_ids(output: Path, questions: dict[str, str], who: Provenance) -> set[str]:
    """Ids already answered in ``output``, each row checked against this run (see the module docstring);
    an unterminated tail that is a prefix of a row (an interrupted write) is cut off the file."""
    if not output.exists():
        return set()
    try:
        data = output.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read the output ({type(exc).__name__})", str(output)) from None
    keep = data.rfind(b"\n") + 1  # everything after the last newline is an unfinished line
    tail = data[keep:]
    done: set[str] = set()
    for number, line in _lines(data[:keep], output):
        if line.strip():
            qid = _check_row(line, f"{output}:{number}", questions, who)
            if qid in done:
                raise DataError(f"id {qid!r} appears twice: {_way_out(who)}", f"{output}:{number}")
            done.add(qid)
    if tail:
        # only a prefix of one of our rows is ours to cut; checked after every full row, so a foreign file is
        # refused by its first line before a byte of it changes
        if not (tail.startswith(ROW_START) or ROW_START.startswith(tail)):
            last = data.count(b"\n") + 1
            raise DataError(f"an unterminated line that is no answer row: {_way_out(who)}", f"{output}:{last}")
        with open(output, "r+b") as handle:
            handle.truncate(keep)
    return done


def _check_row(line: str, where: str, questions: dict[str, str], who: Provenance) -> str:
    """The id of one output row, after checking it was written by this bundle and method for this input's
    question; DataError naming ``where`` (one line, with the way out) otherwise."""
    row = _parse(line, where)
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
    """The method name a run uses — ``method``, or ``d2rag`` when the bundle has it, else its first — checked
    against ``runtime.methods`` without building anything (ConfigError for a method the bundle lacks)."""
    methods = tuple(runtime.methods)
    name = method or ("d2rag" if "d2rag" in methods else methods[0])
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
    from workbench.core.logs import track

    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}", "batch_size")
    who = Provenance(str(runtime.name), str(runtime.version), resolve_method(runtime, method))
    questions = read_questions(input_path)
    output = Path(output_path)
    done = _done_ids(output, dict(questions), who)
    todo = [(qid, q) for qid, q in questions if qid not in done]
    if todo:
        runtime.method(who.method)  # builds the models now, so a failure to load comes before the progress bar
        output.parent.mkdir(parents=True, exist_ok=True)
        with open(output, "ab") as handle:
            answered = _answers(runtime, todo, who.method, batch_size)
            for (qid, question), answer in track(answered, f"infer ({who.method})", total=len(todo)):
                _append(handle, _row(qid, question, answer, who, traces))
    return FileRun(len(questions), len(questions) - len(todo), len(todo), output, who.method)


def _append(handle: Any, line: bytes) -> None:
    """Write one row and make it durable before the next question starts (a kill then loses no written row)."""
    handle.write(line)
    handle.flush()
    os.fsync(handle.fileno())


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
