"""The QA schema: rows, datasets and their validation errors."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset, Value

from workbench.core.errors import DataError
from workbench.data.schema import (
    QA_COLUMNS,
    QA_FEATURES,
    Passage,
    QAExample,
    examples_to_dataset,
    validate_qa_dataset,
    validate_qa_row,
)


def _example(**overrides) -> QAExample:
    values = {
        "id": "q1",
        "question": "Which river flows through Paris?",
        "answers": ["Seine", "the Seine"],
        "gold_passages": [Passage("Seine", "Seine", "The Seine is a river.")],
        "supporting_facts": ["Seine"],
        "metadata": {"template": "hand", "topic": "Places"},
    }
    values.update(overrides)
    return QAExample(**values)


def test_row_round_trip() -> None:
    example = _example(options=["Seine", "Loire"], answer_index=0)
    row = example.to_row()
    assert set(row) == set(QA_COLUMNS)
    assert json.loads(row["metadata"]) == {"template": "hand", "topic": "Places"}
    assert row["gold_passages"] == [{"doc_id": "Seine", "title": "Seine", "text": "The Seine is a river."}]
    assert QAExample.from_row(row) == example
    assert example.answer == "Seine"


def test_examples_to_dataset_has_schema_features() -> None:
    ds = examples_to_dataset([_example(), _example(id="q2", answers=["Loire"])])
    assert ds.features == QA_FEATURES
    assert ds["id"] == ["q1", "q2"]
    assert ds[1]["answers"] == ["Loire"]
    assert ds[0]["answer_index"] == -1
    assert validate_qa_dataset(ds, "mem") is ds


def test_duplicate_ids_rejected() -> None:
    with pytest.raises(DataError, match="duplicate id 'q1'"):
        examples_to_dataset([_example(), _example()])


def test_missing_columns_are_named() -> None:
    ds = examples_to_dataset([_example()]).remove_columns(["answers", "metadata"])
    with pytest.raises(DataError) as info:
        validate_qa_dataset(ds, "my_data.parquet")
    message = str(info.value)
    assert message.startswith("my_data.parquet: ")
    assert "'answers'" in message and "'metadata'" in message and "'question'" not in message
    assert "\n" not in message


def test_wrong_column_type_is_named() -> None:
    ds = examples_to_dataset([_example()]).cast_column("answer_index", Value("string"))
    with pytest.raises(DataError, match=r"answer_index is string, expected int") as info:
        validate_qa_dataset(ds, "hub:x")
    assert "hub:x" in str(info.value)
    bare = Dataset.from_dict({c: [json.dumps([])] for c in QA_COLUMNS})  # every column a string
    with pytest.raises(DataError, match="answers is string, expected list<string>"):
        validate_qa_dataset(bare, "strings")


def test_int64_answer_index_and_extra_columns_pass() -> None:
    ds = examples_to_dataset([_example()]).cast_column("answer_index", Value("int64"))
    ds = ds.add_column("extra", ["x"])
    assert validate_qa_dataset(ds, "ok") is ds


def test_row_defaults_and_metadata_object() -> None:
    clean = validate_qa_row({"id": "a", "question": "q?", "answers": ["x"], "metadata": {"k": 1}}, "here")
    assert clean["options"] == [] and clean["answer_index"] == -1 and clean["gold_passages"] == []
    assert json.loads(clean["metadata"]) == {"k": 1}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"answers": []}, "'answers' must be a non-empty list"),
        ({"answers": "Seine"}, "'answers' must be a non-empty list"),
        ({"question": "  "}, "'question' must be a non-empty string"),
        ({"options": ["a", "b"], "answer_index": 2}, "'answer_index' 2 is out of range for 2 options"),
        ({"answer_index": 0}, "'answer_index' must be -1 when there are no options"),
        ({"answer_index": True, "options": ["a"]}, "'answer_index' must be an integer"),
        ({"gold_passages": [{"doc_id": "d", "title": "t"}]}, r"'gold_passages\[0\]\.text' must be a string"),
        ({"metadata": "[1, 2]"}, "'metadata' must be a JSON object"),
        ({"metadata": "{broken"}, "'metadata' must be a JSON object"),
    ],
)
def test_bad_rows_are_explained(change, message) -> None:
    row = _example().to_row() | change
    with pytest.raises(DataError, match=message) as info:
        validate_qa_row(row, "file.jsonl, row 4")
    assert str(info.value).startswith("file.jsonl, row 4: ")


def test_missing_required_fields_are_named() -> None:
    with pytest.raises(DataError, match="missing field\\(s\\) 'question', 'answers'"):
        validate_qa_row({"id": "a"}, "x")
    with pytest.raises(DataError, match="expected a JSON object, got list"):
        validate_qa_row([1, 2], "x")
