"""The records ``workbench score`` reads: existing answers, one per row, from JSONL, parquet or an HF dataset on disk.

Each row is an object with these fields (others are ignored, so a log may carry labels or metadata):

* ``id`` — a non-empty string or an integer, unique in the file (rows are joined by it);
* ``question`` — a non-empty string;
* ``answer`` — a string: the answer to score (empty is allowed: its token-level features are undefined);
* ``eos`` — optional bool: the answer ended with the model's end-of-sequence token (its log-prob is then scored
  and kept last, as ``collect`` keeps it); default false;
* ``logprobs`` — optional list of numbers: the answer tokens' log-probabilities as the model gave them (the EOS
  token's last when ``eos``), used as they are instead of teacher-forcing;
* ``token_ids`` — optional list of integers: the answer's token ids as the model produced them (EOS excluded);
  teacher-forced as they are, else the text is split by the model's tokenizer (a generation whose tokens are not
  the tokenizer's own split of its text then scores differently);
* ``contexts`` — optional list of strings: the retrieved passages, ranked (DENSE reads them);
* ``samples`` — optional list of sampled answers, each a string or an object ``{text, eos?, logprobs?,
  token_ids?}`` (fields as the answer's); when one row gives samples every row must give the same number of them.

:func:`read_records` checks every row before anything is scored: a bad one is a one-line
:class:`~workbench.core.errors.DataError` naming the file, the row and the field (values read from the file are
never echoed), with :data:`SCHEMA_LINE` to say what a row should be.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.core.errors import DataError

SCHEMA_LINE = "a row is {id, question, answer, eos?, logprobs?, token_ids?, contexts?, samples?} (docs/score.md)"
"""The one line every bad-record error ends with."""


@dataclass(frozen=True)
class GivenText:
    """One answer to score: its ``text``, whether it ended with EOS, and the log-probs and token ids the model gave
    (None: not given)."""

    text: str
    eos: bool = False
    logprobs: tuple[float, ...] | None = None
    token_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ScoreRecord:
    """One checked row: ``position`` (its index in the file), ``id`` (as a string), ``question``, the ``answer``,
    the ranked ``contexts`` (None: not given) and the given ``samples`` (None: not given)."""

    position: int
    id: str
    question: str
    answer: GivenText
    contexts: tuple[str, ...] | None = None
    samples: tuple[GivenText, ...] | None = field(default=None)


def read_rows(path: Path) -> list[Any]:
    """The raw rows of ``path``: a ``.jsonl`` / ``.json`` file of one JSON object per line, a ``.parquet`` file, or a
    directory holding an HF dataset saved with ``save_to_disk``. DataError naming the file (and line) otherwise."""
    path = Path(path)
    if path.is_dir():
        import datasets

        try:
            loaded = datasets.load_from_disk(str(path))
        except (FileNotFoundError, ValueError, OSError):
            raise DataError("not an HF dataset saved with save_to_disk", str(path)) from None
        if isinstance(loaded, datasets.DatasetDict):
            raise DataError(f"a dataset with splits: give one split's folder ({', '.join(loaded)})", str(path))
        return loaded.to_list()
    if not path.is_file():
        raise DataError("no such file", str(path))
    if path.suffix == ".parquet":
        import pyarrow
        import pyarrow.parquet

        try:
            return pyarrow.parquet.read_table(path).to_pylist()
        except (pyarrow.ArrowException, OSError):
            raise DataError("not a readable parquet file", str(path)) from None
    if path.suffix not in (".jsonl", ".json"):
        raise DataError("records must be .jsonl, .parquet or an HF dataset folder", str(path))
    rows: list[Any] = []
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise DataError("not UTF-8 text", str(path)) from None
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            raise DataError(f"line {number} is not JSON; {SCHEMA_LINE}", f"{path}:{number}") from None
    return rows


def read_records(path: str | Path) -> list[ScoreRecord]:
    """Every row of ``path`` (:func:`read_rows`) checked into a :class:`ScoreRecord`; see the module docstring."""
    path = Path(path)
    rows = read_rows(path)
    if not rows:
        raise DataError("the file holds no records", str(path))
    records: list[ScoreRecord] = []
    seen: dict[str, int] = {}
    for position, row in enumerate(rows):
        where = f"{path}: row {position + 1}"
        record = check_row(row, position, where)
        if record.id in seen:
            raise DataError(f"field 'id' repeats the id of row {seen[record.id] + 1}; {SCHEMA_LINE}", where)
        seen[record.id] = position
        records.append(record)
    counts = {len(r.samples) for r in records if r.samples is not None}
    with_samples = sum(1 for r in records if r.samples is not None)
    if with_samples and (with_samples != len(records) or len(counts) != 1):
        count = len(next(r.samples for r in records if r.samples is not None))
        first = next(r for r in records if r.samples is None or len(r.samples) != count)
        raise DataError(
            "field 'samples': every row must give the same number of samples, or none does; " + SCHEMA_LINE,
            f"{path}: row {first.position + 1}",
        )
    return records


def check_row(row: Any, position: int, where: str) -> ScoreRecord:
    """One raw row as a :class:`ScoreRecord`; DataError at ``where`` naming the first bad field."""
    if not isinstance(row, dict):
        raise DataError(f"not an object; {SCHEMA_LINE}", where)
    for name in ("id", "question", "answer"):
        if row.get(name) is None:
            raise DataError(f"missing field '{name}'; {SCHEMA_LINE}", where)
    raw_id = row["id"]
    if isinstance(raw_id, bool) or not isinstance(raw_id, str | int) or (isinstance(raw_id, str) and not raw_id):
        raise DataError(f"field 'id' must be a non-empty string or an integer; {SCHEMA_LINE}", where)
    question = row["question"]
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"field 'question' must be a non-empty string; {SCHEMA_LINE}", where)
    answer = _given(row, "answer", where, text_key="answer")
    contexts = row.get("contexts")
    if contexts is not None:
        if not isinstance(contexts, list) or not all(isinstance(c, str) for c in contexts):
            raise DataError(f"field 'contexts' must be a list of strings; {SCHEMA_LINE}", where)
        contexts = tuple(contexts)
    samples = row.get("samples")
    if samples is not None:
        if not isinstance(samples, list) or not samples:
            raise DataError(f"field 'samples' must be a non-empty list; {SCHEMA_LINE}", where)
        samples = tuple(
            _given({"text": s} if isinstance(s, str) else s, f"samples[{i}]", where, text_key="text")
            for i, s in enumerate(samples)
        )
    return ScoreRecord(position, str(raw_id), question, answer, contexts, samples)


def _given(holder: Any, name: str, where: str, *, text_key: str) -> GivenText:
    """The answer (or one sample) of ``holder``: its text at ``text_key`` and its optional ``eos`` / ``logprobs``."""
    if not isinstance(holder, dict):
        raise DataError(f"field '{name}' must be a string or an object with 'text'; {SCHEMA_LINE}", where)
    prefix = "" if name == "answer" else f"{name}."
    text = holder.get(text_key)
    if not isinstance(text, str):
        raise DataError(f"field '{prefix}{text_key}' must be a string; {SCHEMA_LINE}", where)
    eos = holder.get("eos", False)
    if eos is None:
        eos = False
    if not isinstance(eos, bool):
        raise DataError(f"field '{prefix}eos' must be true or false; {SCHEMA_LINE}", where)
    logprobs = holder.get("logprobs")
    if logprobs is not None:
        ok = isinstance(logprobs, list) and all(
            isinstance(v, int | float) and not isinstance(v, bool) and not math.isnan(v) and v <= 0 for v in logprobs
        )
        if not ok or (eos and not logprobs):
            raise DataError(
                f"field '{prefix}logprobs' must be a list of log-probabilities (numbers <= 0, the EOS token's last "
                f"when eos); {SCHEMA_LINE}",
                where,
            )
        logprobs = tuple(float(v) for v in logprobs)
    token_ids = holder.get("token_ids")
    if token_ids is not None:
        if not isinstance(token_ids, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in token_ids
        ):
            raise DataError(
                f"field '{prefix}token_ids' must be a list of token ids (integers >= 0); {SCHEMA_LINE}", where
            )
        token_ids = tuple(token_ids)
    return GivenText(text.strip(), eos, logprobs, token_ids)
