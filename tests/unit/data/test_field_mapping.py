"""A user's own files through the field mapping: QA rows, corpus rows, the split column, whole files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpdesk_data import corpus_rows, question_rows, write_helpdesk
from workbench.core.errors import ConfigError, DataError
from workbench.data.corpus import read_corpus_file
from workbench.data.field_mapping import (
    CORPUS_TARGETS,
    check_field_map,
    map_corpus_row,
    map_qa_row,
    qa_targets,
    row_split,
)
from workbench.data.user_dataset import read_user_dataset

FIELDS = {"id": "ticket_id", "question": "subject", "answers": "resolution", "gold_passages": "gold_doc"}
DOCUMENTS = {"100": ("Oslo office access", "The door code of the Oslo office is 4100.")}


def _ticket(**extra) -> dict:
    return {"ticket_id": 7, "subject": "Door code of Oslo?", "resolution": "4100", "gold_doc": "100", **extra}


def test_mapped_columns_become_schema_fields_in_their_looser_forms():
    row, kept = map_qa_row(_ticket(), FIELDS, "f, row 1", documents=DOCUMENTS)
    assert row["id"] == "7" and row["question"] == "Door code of Oslo?" and row["answers"] == ["4100"]
    # a gold passage given by corpus id is that document, whole
    assert row["gold_passages"] == [
        {"doc_id": "100", "title": "Oslo office access", "text": "The door code of the Oslo office is 4100."}
    ]
    assert row["options"] == [] and row["answer_index"] == -1 and json.loads(row["metadata"]) == {} and kept == []


def test_unknown_columns_are_kept_in_metadata_and_named():
    row, kept = map_qa_row(
        _ticket(kind="company", priority=2, metadata={"priority": "mine"}, split="dev"),
        {**FIELDS, "template": "kind"},
        "f, row 1",
        documents=DOCUMENTS,
        skip=("split",),
    )
    # the kind is the template; an unknown column joins metadata unless the row's own metadata has that key; the
    # split column is neither
    assert json.loads(row["metadata"]) == {"template": "company", "priority": "mine"}
    assert kept == ["priority"]
    row, kept = map_qa_row(_ticket(priority=2, added="2026-01-01"), FIELDS, "f, row 1", documents=DOCUMENTS)
    assert json.loads(row["metadata"]) == {"priority": 2, "added": "2026-01-01"} and kept == ["priority", "added"]


def test_a_column_named_as_a_mapped_field_is_no_field_any_more():
    row, kept = map_qa_row(_ticket(question="not this one"), FIELDS, "f, row 1", documents=DOCUMENTS)
    assert row["question"] == "Door code of Oslo?" and kept == ["question"]


def test_a_missing_column_names_the_column_and_the_key():
    with pytest.raises(DataError) as err:
        map_qa_row({"ticket_id": 1, "subject": "Q?"}, FIELDS, "f.jsonl, row 4")
    assert str(err.value) == "f.jsonl, row 4: no column 'resolution' (data.fields.answers)"
    with pytest.raises(DataError, match=r"row 4: no column 'question': name the column .* in data\.fields\.question"):
        map_qa_row({"id": "1", "answers": ["a"]}, {}, "f.jsonl, row 4")


def test_an_unknown_gold_document_and_a_bad_value_name_the_row():
    with pytest.raises(DataError, match=r"^f, row 2: gold_passages: document id '999' is not in the corpus$"):
        map_qa_row(_ticket(gold_doc="999"), FIELDS, "f, row 2", documents=DOCUMENTS)
    with pytest.raises(DataError, match=r"^f, row 2: 'answers' must be a non-empty list"):
        map_qa_row(_ticket(resolution=""), FIELDS, "f, row 2", documents=DOCUMENTS)
    with pytest.raises(DataError, match=r"^f, row 2: expected a JSON object, got list$"):
        map_qa_row([1, 2], FIELDS, "f, row 2")


def test_corpus_rows_through_the_corpus_mapping():
    fields = {"doc_id": "id", "title": "name", "text": "body", "topic": "category"}
    document, dropped = map_corpus_row(corpus_rows()[0], fields, "c, row 1")
    assert document == ("100", "Oslo office access", corpus_rows()[0]["body"], "facilities") and dropped == ["updated"]
    document, dropped = map_corpus_row({"doc_id": "a", "title": "A", "text": "t"}, {}, "c, row 1")
    assert document == ("a", "A", "t", "") and dropped == []  # the topic is optional
    with pytest.raises(DataError) as err:
        map_corpus_row({"id": 1, "name": "A"}, fields, "c.jsonl, row 3")
    assert str(err.value) == "c.jsonl, row 3: no column 'body' (data.corpus_fields.text)"
    with pytest.raises(DataError, match=r"^c, row 1: 'title' must be a string, got int$"):
        map_corpus_row({"doc_id": "a", "title": 5, "text": "t"}, {}, "c, row 1")


def test_the_split_column_and_its_names():
    assert row_split({"split": "test"}, "split", {}, "f, row 1") == "test"
    assert row_split({"split": "dev"}, "split", {"dev": "calib"}, "f, row 1") == "calib"
    with pytest.raises(DataError) as err:
        row_split({"split": "training"}, "split", {"dev": "calib"}, "f.jsonl, row 9")
    assert str(err.value) == (
        "f.jsonl, row 9: split 'training' is not one of train, calib, val, test: map it to one in data.split_names"
    )
    with pytest.raises(DataError, match=r"^f, row 1: no column 'fold' \(data\.split_column\)$"):
        row_split({"split": "test"}, "fold", {}, "f, row 1")
    with pytest.raises(DataError, match=r"split 'x{20}.*… is not one of") as err:
        row_split({"split": "x" * 5000}, "split", {}, "f, row 1")
    assert len(str(err.value)) < 300  # a long value is cut, not echoed whole


def test_a_mapping_names_known_fields_and_column_names():
    check_field_map({"id": "ticket_id", "template": "kind"}, qa_targets(), "data.fields")
    with pytest.raises(ConfigError, match=r"^data\.fields: unknown field\(s\) 'ticket' \(known: id, question"):
        check_field_map({"ticket": "id"}, qa_targets(), "data.fields")
    with pytest.raises(ConfigError, match=r"^data\.corpus_fields\.text: must map each field to a column name"):
        check_field_map({"text": 3}, CORPUS_TARGETS, "data.corpus_fields")


def test_a_whole_user_file_with_a_split_column(tmp_path: Path):
    questions, corpus = write_helpdesk(tmp_path, per_kind=6)
    read = read_corpus_file(corpus, {"doc_id": "id", "title": "name", "text": "body", "topic": "category"})
    assert len(read.documents) == 12 and read.dropped == ["updated"] and read.documents[0].doc_id == "100"
    documents = {d.doc_id: (d.title, d.extract) for d in read.documents}
    fields = {**FIELDS, "template": "kind"}
    user = read_user_dataset(
        questions, fields=fields, split_column="split", split_names={"dev": "calib", "holdout": "test"},
        documents=documents,
    )  # fmt: skip
    assert user.records == 12 and len(user.rows) == 12 and user.kept_in_metadata == ["priority"]
    assert user.split_sizes() == {"calib": 8, "test": 4}
    assert [json.loads(r["metadata"])["template"] for r in user.rows][:2] == ["company", "company"]
    # a limit maps the first rows only, but every row's split is read
    few = read_user_dataset(
        questions, fields=fields, split_column="split", split_names={"dev": "calib", "holdout": "test"},
        documents=documents, limit=3,
    )  # fmt: skip
    assert len(few.rows) == 3 and len(few.splits) == 12 and few.records == 12
    # a bad split value past the checked rows is still found
    rows = question_rows(6)
    rows[10]["split"] = "later"
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=r"questions\.jsonl, row 11: split 'later' is not one of"):
        read_user_dataset(
            questions, fields=fields, split_column="split", split_names={"dev": "calib", "holdout": "test"},
            documents=documents, limit=3,
        )  # fmt: skip
