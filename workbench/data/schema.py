"""The QA example schema shared by every dataset the workbench reads or builds.

One row per question. Columns (see :data:`QA_FEATURES`):

==================  =====================================  ===============================================
column              type                                   meaning
==================  =====================================  ===============================================
``id``              string                                 unique within the dataset
``question``        string                                 the question text
``answers``         list of string                         ``answers[0]`` is the canonical gold answer, the
                                                           rest are accepted aliases
``options``         list of string                         answer options; empty unless multiple choice
``answer_index``    int32                                  index of the gold option; -1 unless multiple
                                                           choice
``gold_passages``   list of {doc_id, title, text}          the passages that support the answer
``supporting_facts`` list of string                        titles of the supporting documents
``metadata``        string                                 a JSON object (template, topic, dataset, ...)
==================  =====================================  ===============================================
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from datasets import Dataset, Features, List, Value

from workbench.core.errors import DataError

if TYPE_CHECKING:
    import datasets

QA_COLUMNS: tuple[str, ...] = (
    "id",
    "question",
    "answers",
    "options",
    "answer_index",
    "gold_passages",
    "supporting_facts",
    "metadata",
)

PASSAGE_FEATURES = {"doc_id": Value("string"), "title": Value("string"), "text": Value("string")}

QA_FEATURES = Features(
    {
        "id": Value("string"),
        "question": Value("string"),
        "answers": List(Value("string")),
        "options": List(Value("string")),
        "answer_index": Value("int32"),
        "gold_passages": List(PASSAGE_FEATURES),
        "supporting_facts": List(Value("string")),
        "metadata": Value("string"),
    }
)

# Columns a hand-written row may leave out, with the value they take.
_ROW_DEFAULTS: dict[str, Any] = {
    "options": [],
    "answer_index": -1,
    "gold_passages": [],
    "supporting_facts": [],
    "metadata": "{}",
}


@dataclass(frozen=True)
class Passage:
    """A gold passage: the document id (as in the corpus), its title and its text."""

    doc_id: str
    title: str
    text: str

    def to_dict(self) -> dict[str, str]:
        """The passage as a plain ``{doc_id, title, text}`` dict (the Arrow struct layout)."""
        return {"doc_id": self.doc_id, "title": self.title, "text": self.text}


@dataclass
class QAExample:
    """One QA example in memory; ``metadata`` is a dict here and a JSON string in a row.

    Invariants (checked by :func:`validate_qa_row`): non-empty ``id``, ``question`` and ``answers[0]``; when
    ``options`` is non-empty, ``0 <= answer_index < len(options)``, otherwise ``answer_index == -1``.
    """

    id: str
    question: str
    answers: list[str]
    options: list[str] = field(default_factory=list)
    answer_index: int = -1
    gold_passages: list[Passage] = field(default_factory=list)
    supporting_facts: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def answer(self) -> str:
        """The canonical gold answer (``answers[0]``)."""
        return self.answers[0]

    def to_row(self) -> dict[str, Any]:
        """The example as a row matching :data:`QA_FEATURES` (metadata serialised as sorted-key JSON)."""
        return {
            "id": self.id,
            "question": self.question,
            "answers": list(self.answers),
            "options": list(self.options),
            "answer_index": int(self.answer_index),
            "gold_passages": [p.to_dict() for p in self.gold_passages],
            "supporting_facts": list(self.supporting_facts),
            "metadata": json.dumps(self.metadata, sort_keys=True, ensure_ascii=False),
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any], where: str = "row") -> QAExample:
        """Build an example from a schema row (missing optional columns take their defaults).

        Raises :class:`DataError` naming ``where`` when the row does not satisfy the schema.
        """
        clean = validate_qa_row(row, where)
        return cls(
            id=clean["id"],
            question=clean["question"],
            answers=clean["answers"],
            options=clean["options"],
            answer_index=clean["answer_index"],
            gold_passages=[Passage(**p) for p in clean["gold_passages"]],
            supporting_facts=clean["supporting_facts"],
            metadata=json.loads(clean["metadata"]),
        )


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _check_passages(value: Any) -> str | None:
    """None when ``value`` is a list of {doc_id, title, text} string dicts, else what is wrong."""
    if not isinstance(value, list):
        return "'gold_passages' must be a list"
    for i, passage in enumerate(value):
        if not isinstance(passage, Mapping):
            return f"'gold_passages[{i}]' must be an object with doc_id, title, text"
        for key in PASSAGE_FEATURES:
            if not isinstance(passage.get(key), str):
                return f"'gold_passages[{i}].{key}' must be a string"
    return None


def _normalise_metadata(value: Any) -> str | None:
    """The metadata as a JSON-object string, or None when it is neither a dict nor a JSON-object string."""
    if isinstance(value, Mapping):
        return json.dumps(dict(value), sort_keys=True, ensure_ascii=False)
    if isinstance(value, str):
        try:
            parsed = json.loads(value or "{}")
        except json.JSONDecodeError:
            return None
        return (value or "{}") if isinstance(parsed, dict) else None
    return None


def _row_problem(row: Mapping[str, Any]) -> str | None:
    """What is wrong with a complete row (all columns present), or None."""
    for key in ("id", "question"):
        if not isinstance(row[key], str) or not row[key].strip():
            return f"'{key}' must be a non-empty string"
    if not _is_str_list(row["answers"]) or not row["answers"] or not row["answers"][0].strip():
        return "'answers' must be a non-empty list of strings with a non-empty first answer"
    if not _is_str_list(row["options"]):
        return "'options' must be a list of strings"
    index = row["answer_index"]
    if isinstance(index, bool) or not isinstance(index, int):
        return "'answer_index' must be an integer"
    if row["options"] and not 0 <= index < len(row["options"]):
        return f"'answer_index' {index} is out of range for {len(row['options'])} options"
    if not row["options"] and index != -1:
        return "'answer_index' must be -1 when there are no options"
    passage_problem = _check_passages(row["gold_passages"])
    if passage_problem:
        return passage_problem
    if not _is_str_list(row["supporting_facts"]):
        return "'supporting_facts' must be a list of strings"
    return None


def validate_qa_row(row: Any, where: str) -> dict[str, Any]:
    """Check one row against the schema and return it completed (defaults filled, metadata as a JSON string).

    ``id``, ``question`` and ``answers`` are required; the other columns default to empty / -1 / ``"{}"``;
    ``metadata`` may be given as an object. Unknown keys are dropped. Raises :class:`DataError` at ``where``.
    """
    if not isinstance(row, Mapping):
        raise DataError(f"expected a JSON object, got {type(row).__name__}", where)
    missing = [key for key in ("id", "question", "answers") if key not in row]
    if missing:
        raise DataError(f"missing field(s) {', '.join(repr(k) for k in missing)}", where)
    clean = {key: row.get(key, _ROW_DEFAULTS.get(key)) for key in QA_COLUMNS}
    for key, default in _ROW_DEFAULTS.items():
        if clean[key] is None:
            clean[key] = default
    problem = _row_problem(clean)
    if problem:
        raise DataError(problem, where)
    metadata = _normalise_metadata(clean["metadata"])
    if metadata is None:
        raise DataError("'metadata' must be a JSON object (or a string holding one)", where)
    clean["metadata"] = metadata
    return clean


def examples_to_dataset(examples: Iterable[QAExample]) -> datasets.Dataset:
    """A :class:`datasets.Dataset` with :data:`QA_FEATURES` holding ``examples`` in order (ids must be unique)."""
    return rows_to_dataset([example.to_row() for example in examples], where="examples")


def rows_to_dataset(rows: Sequence[Mapping[str, Any]], where: str) -> datasets.Dataset:
    """A dataset with :data:`QA_FEATURES` from already-validated rows; duplicate ids raise :class:`DataError`."""

    seen: set[str] = set()
    for number, row in enumerate(rows, start=1):
        if row["id"] in seen:
            raise DataError(f"row {number}: duplicate id {row['id']!r}", where)
        seen.add(row["id"])
    columns = {key: [row[key] for row in rows] for key in QA_COLUMNS}
    return Dataset.from_dict(columns, features=QA_FEATURES)


def _kind(feature: Any) -> str:
    """A short, comparable description of a feature type (``string``, ``int``, ``list<string>``, ...)."""
    if isinstance(feature, Value):
        dtype = feature.dtype
        if dtype.startswith(("int", "uint")):
            return "int"
        return "string" if dtype in ("string", "large_string") else dtype
    if isinstance(feature, List):
        return f"list<{_kind(feature.feature)}>"
    if isinstance(feature, dict):
        inner = ",".join(f"{key}:{_kind(value)}" for key, value in sorted(feature.items()))
        return "{" + inner + "}"
    return type(feature).__name__


def validate_qa_dataset(ds: datasets.Dataset, where: str) -> datasets.Dataset:
    """Check that ``ds`` has every schema column with the schema's type (extra columns are allowed).

    Integer widths are not checked (int32 and int64 both pass). Returns ``ds`` unchanged; raises
    :class:`DataError` with one line naming every missing or mistyped column and ``where``.
    """
    features = ds.features
    missing = [column for column in QA_COLUMNS if column not in features]
    wrong = [
        f"{column} is {_kind(features[column])}, expected {_kind(QA_FEATURES[column])}"
        for column in QA_COLUMNS
        if column in features and _kind(features[column]) != _kind(QA_FEATURES[column])
    ]
    problems = []
    if missing:
        problems.append(f"missing column(s) {', '.join(repr(c) for c in missing)}")
    if wrong:
        problems.append(f"wrong type(s): {'; '.join(wrong)}")
    if problems:
        raise DataError("not a QA dataset: " + "; ".join(problems), where)
    return ds
