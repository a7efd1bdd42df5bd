"""A user's own files read into the workbench schemas: field mapping, unknown columns and the split column.

A user's QA file or corpus file rarely names its columns as the schemas do (docs/data.md). ``data.fields`` maps QA
schema fields to the file's columns (``{id: ticket_id, question: subject, answers: resolution}``) and
``data.corpus_fields`` does the same for the corpus (``{doc_id: id, text: body}``); a field the mapping leaves out is
read from the column of its own name. What reading a row does:

* **QA rows** (:func:`map_qa_row`): the mapped columns become the schema fields, then the row is checked as
  :func:`~workbench.data.schema.validate_qa_row` checks a schema row. Looser forms are accepted: ``id`` may be an
  integer (written as a string), ``answers`` one string (one answer), and ``gold_passages`` one or more corpus
  document ids instead of ``{doc_id, title, text}`` objects (each becomes its document's title and text).
  ``template`` is the column whose value becomes ``metadata.template``, the question kind the answer stage and the
  report group by. Every other column — neither a field nor the split column — is **kept in ``metadata``** under
  its own name (a key the row's own metadata already holds keeps its value); the caller says which, in one line.
* **Corpus rows** (:func:`map_corpus_row`): ``doc_id`` (an integer is written as a string), ``title`` and ``text``,
  and the optional ``topic``. Other columns are **dropped** (a passage has no metadata); the caller names them.
* **The split column** (:func:`row_split`): the row's split, one of train / calib / val / test, or a value that
  ``data.split_names`` maps to one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.core.config import printable
from workbench.core.errors import ConfigError, DataError
from workbench.data.article_splits import SPLITS

USER_FILE_SUFFIXES: tuple[str, ...] = (".jsonl", ".json", ".parquet")
"""The file types a user's dataset or corpus may be."""

QA_REQUIRED: tuple[str, ...] = ("id", "question", "answers")
TEMPLATE = "template"
"""The one ``data.fields`` name that is no schema field: its column's value becomes ``metadata.template``."""

CORPUS_REQUIRED: tuple[str, ...] = ("doc_id", "title", "text")
CORPUS_TARGETS: tuple[str, ...] = (*CORPUS_REQUIRED, "topic")
"""What ``data.corpus_fields`` may name: a corpus document's fields (``topic`` optional)."""


def qa_targets() -> tuple[str, ...]:
    """What ``data.fields`` may name: the QA schema's fields, then ``template`` (the schema module imports
    ``datasets``, so it is imported here, not when a corpus is read at run time)."""
    from workbench.data.schema import QA_COLUMNS

    return (*QA_COLUMNS, TEMPLATE)


MAX_SHOWN_CHARS = 80
"""Most characters of a value read from a file quoted in an error (the rest is cut, marked with …)."""


def is_user_file(source: str) -> bool:
    """Whether a data source names a local file of a type the workbench reads (:data:`USER_FILE_SUFFIXES`)."""

    return Path(str(source).strip()).suffix.lower() in USER_FILE_SUFFIXES


def shown(value: Any) -> str:
    """A value read from a user's file as an error quotes it: its repr, control characters escaped, cut short."""

    return printable(repr(value), MAX_SHOWN_CHARS)


def check_field_map(fields: Mapping[str, Any], targets: Sequence[str], key: str) -> None:
    """ConfigError naming ``key`` when ``fields`` maps a name not in ``targets`` or to anything but a non-empty column
    name (a string)."""
    unknown = [name for name in fields if name not in targets]
    if unknown:
        raise ConfigError(f"unknown field(s) {', '.join(map(repr, unknown))} (known: {', '.join(targets)})", key)
    for name, column in fields.items():
        if not isinstance(column, str) or not column.strip():
            raise ConfigError(f"must map each field to a column name (a string), got {column!r}", f"{key}.{name}")


def _missing(target: str, fields: Mapping[str, str], key: str) -> str:
    """Why a required field has no value: its mapped column is absent, or the file has no column of its name."""
    if target in fields:
        return f"no column {fields[target]!r} ({key}.{target})"
    return f"no column {target!r}: name the column that holds the {target} in {key}.{target}"


def _as_plain(value: Any) -> Any:
    """``value`` as JSON values (a Parquet date or decimal becomes its string), to keep it in ``metadata``."""
    return json.loads(json.dumps(value, default=str, ensure_ascii=False))


def _metadata_of(row: Mapping[str, Any], column: str) -> Any:
    """The row's own metadata as a dict when it is one (or a JSON string of one); else the value as it is, for the
    schema check to refuse."""
    value = row.get(column, {})
    if isinstance(value, str):
        try:
            parsed = json.loads(value or "{}")
        except json.JSONDecodeError:
            return value
        return parsed if isinstance(parsed, dict) else value
    return dict(value) if isinstance(value, Mapping) else value


def _gold_passages(value: Any, documents: Mapping[str, tuple[str, str]] | None, where: str) -> Any:
    """Gold passages with every document id (a string) replaced by its corpus document's ``{doc_id, title, text}``;
    objects are left for the schema check. One id may stand alone."""
    items = [value] if isinstance(value, str | int) and not isinstance(value, bool) else value
    if not isinstance(items, list):
        return value
    out = []
    for item in items:
        if isinstance(item, str | int) and not isinstance(item, bool):
            doc_id = str(item)
            if documents is None or doc_id not in documents:
                raise DataError(f"gold_passages: document id {shown(doc_id)} is not in the corpus", where)
            title, text = documents[doc_id]
            out.append({"doc_id": doc_id, "title": title, "text": text})
        else:
            out.append(item)
    return out


def map_qa_row(
    row: Any,
    fields: Mapping[str, str],
    where: str,
    *,
    documents: Mapping[str, tuple[str, str]] | None = None,
    skip: Sequence[str] = (),
) -> tuple[dict[str, Any], list[str]]:
    """One record of a user's QA file as a complete schema row, and the columns kept in its ``metadata``.

    ``fields`` maps QA fields (:func:`qa_targets`) to columns; ``documents`` maps corpus doc ids to ``(title, text)``
    (to resolve gold passages given by id); ``skip`` are columns neither mapped nor kept (the split column). Raises
    :class:`DataError` at ``where`` (the file and row) for a missing required column or a value the schema refuses.
    """
    from workbench.data.schema import QA_COLUMNS, validate_qa_row

    if not isinstance(row, Mapping):
        raise DataError(f"expected a JSON object, got {type(row).__name__}", where)
    columns = {target: fields.get(target, target) for target in qa_targets()}
    out: dict[str, Any] = {}
    for target in QA_COLUMNS:
        if columns[target] in row:
            out[target] = row[columns[target]]
        elif target in QA_REQUIRED:
            raise DataError(_missing(target, fields, "data.fields"), where)
    if isinstance(out["id"], int) and not isinstance(out["id"], bool):
        out["id"] = str(out["id"])
    if isinstance(out["answers"], str):
        out["answers"] = [out["answers"]]
    if "gold_passages" in out:
        out["gold_passages"] = _gold_passages(out["gold_passages"], documents, where)
    metadata = _metadata_of(row, columns["metadata"])
    kept = [column for column in row if column not in columns.values() and column not in skip]
    if isinstance(metadata, dict):
        if columns[TEMPLATE] in row:
            metadata[TEMPLATE] = _as_plain(row[columns[TEMPLATE]])
        for column in kept:
            metadata.setdefault(str(column), _as_plain(row[column]))
    out["metadata"] = metadata
    return validate_qa_row(out, where), kept


def map_corpus_row(row: Any, fields: Mapping[str, str], where: str) -> tuple[tuple[str, str, str, str], list[str]]:
    """One record of a user's corpus file as ``(doc_id, title, text, topic)``, and the columns it drops.

    ``fields`` maps corpus fields (:data:`CORPUS_TARGETS`) to columns. DataError at ``where`` for a missing column or a
    value that is not a string (an integer doc id is written as a string; a missing topic is empty)."""
    if not isinstance(row, Mapping):
        raise DataError(f"expected a JSON object, got {type(row).__name__}", where)
    columns = {target: fields.get(target, target) for target in CORPUS_TARGETS}
    values: dict[str, str] = {}
    for target in CORPUS_REQUIRED:
        if columns[target] not in row:
            raise DataError(_missing(target, fields, "data.corpus_fields"), where)
        value = row[columns[target]]
        if target == "doc_id" and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            raise DataError(f"'{target}' must be a string, got {type(value).__name__}", where)
        values[target] = value
    topic = row.get(columns["topic"])
    dropped = [column for column in row if column not in columns.values()]
    return (values["doc_id"], values["title"], values["text"], "" if topic is None else str(topic)), dropped


def row_split(row: Any, column: str, names: Mapping[str, str], where: str) -> str:
    """The split a record names in its split ``column``: the value itself when it is one of train / calib / val /
    test, else what ``names`` (``data.split_names``) maps it to. DataError at ``where`` otherwise."""
    if not isinstance(row, Mapping) or column not in row:
        raise DataError(f"no column {column!r} (data.split_column)", where)
    value = row[column]
    split = names.get(value, value) if isinstance(value, str) else None
    if split not in SPLITS:
        raise DataError(
            f"split {shown(value)} is not one of {', '.join(SPLITS)}: map it to one in data.split_names", where
        )
    return split
