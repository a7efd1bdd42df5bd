"""Answer a JSONL file of questions into a JSONL file of answers, resuming where an interrupted run stopped.

Input: one JSON object per line with a string ``question`` and an optional ``id`` (string or integer; default the
line number). Only ``id`` and ``question`` are read — any other field (a gold answer, say) is ignored and never
reaches a method. A malformed line, a missing question or a repeated id is a one-line error naming ``file:line``.

Output: one JSON object per answer, ``{"id", "question", "method", "answer", ...}`` (the fields of
:class:`~workbench.runtime.runtime.RuntimeAnswer`; the full trace only with ``traces=True``), appended batch by
batch and flushed to disk. On a re-run, the ids already in the output are skipped, so none is answered twice; a last
line cut short by an interruption is dropped and its question answered again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.core.errors import DataError


@dataclass
class FileRun:
    """What :func:`answer_file` did: questions in the input, already answered before, answered now."""

    total: int
    skipped: int
    answered: int
    output: Path


def read_questions(path: str | Path) -> list[tuple[str, str]]:
    """``[(id, question)]`` from a JSONL file (see the module docstring); DataError naming ``file:line``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError("input file not found", str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read the input ({type(exc).__name__})", str(path)) from None
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"not a JSON object ({exc.msg})", where) from None
        if not isinstance(row, dict):
            raise DataError("each line must be a JSON object with a 'question'", where)
        question = row.get("question")
        if not isinstance(question, str) or not question.strip():
            raise DataError("'question' must be a non-empty string", where)
        raw_id = row.get("id", number)
        if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
            raise DataError(f"'id' must be a string or an integer, got {raw_id!r}", where)
        qid = str(raw_id)
        if qid in seen:
            raise DataError(f"id {qid!r} appears twice", where)
        seen.add(qid)
        out.append((qid, question))
    if not out:
        raise DataError("the input holds no questions", str(path))
    return out


def _done_ids(output: Path) -> set[str]:
    """Ids already answered in ``output``; a trailing partial line (an interrupted write) is cut off the file."""
    if not output.exists():
        return set()
    data = output.read_bytes()
    keep = data.rfind(b"\n") + 1  # everything after the last newline is an unfinished line
    done: set[str] = set()
    for number, line in enumerate(data[:keep].decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            done.add(str(row["id"]))
        except (json.JSONDecodeError, KeyError, TypeError):
            where = f"{output}:{number}"
            raise DataError("not an answers file written by `workbench infer` (bad line)", where) from None
    if keep < len(data):
        with open(output, "r+b") as handle:
            handle.truncate(keep)
    return done


def _batches(items: list[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def answer_file(
    runtime: Any,
    input_path: str | Path,
    output_path: str | Path,
    *,
    method: str | None = None,
    batch_size: int = 8,
    traces: bool = False,
) -> FileRun:
    """Answer every question of ``input_path`` not yet in ``output_path`` (see the module docstring)."""
    from workbench.core.logs import track

    questions = read_questions(input_path)
    output = Path(output_path)
    output.parent.mkdir(parents=True, exist_ok=True)
    done = _done_ids(output)
    todo = [(qid, q) for qid, q in questions if qid not in done]
    runner = runtime.method(method)  # an unknown method fails before any question is answered
    batches = list(_batches(todo, batch_size))
    with open(output, "a", encoding="utf-8") as handle:
        for batch in track(batches, f"infer ({runner.name})", total=len(batches)):
            answers = runtime.answer_many([q for _, q in batch], runner.name, batch_size=batch_size)
            for (qid, _), answer in zip(batch, answers, strict=True):
                handle.write(json.dumps(_row(qid, answer, traces), ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    return FileRun(len(questions), len(questions) - len(todo), len(todo), output)


def _row(qid: str, answer: Any, traces: bool) -> dict[str, Any]:
    row = answer.to_dict()
    if not traces:
        row.pop("trace", None)
    return {"id": qid, "question": row.pop("question"), "method": row.pop("method"), "answer": row.pop("text"), **row}
