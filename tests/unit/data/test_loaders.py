"""Dataset loaders: local schema files, raw hub-format fixtures through each mapper, hub failures offline."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.unit.data import FIXTURES, fake_articles
from workbench.core.errors import DataError
from workbench.data.dataset_store import save_dataset_dict
from workbench.data.loaders import load_qa_dataset, load_raw_local, read_rows
from workbench.data.schema import QA_FEATURES, QAExample
from workbench.data.wikiqa import build_wikiqa


def _rows(n: int = 3) -> list[dict]:
    return [
        QAExample(id=f"q{i}", question=f"Question {i}?", answers=[f"answer {i}"], metadata={"i": i}).to_row()
        for i in range(n)
    ]


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------ local schema files


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_local_files_round_trip(tmp_path: Path, suffix: str) -> None:
    rows = _rows()
    path = tmp_path / f"data{suffix}"
    if suffix == ".jsonl":
        _write_jsonl(path, rows)
    elif suffix == ".json":
        path.write_text(json.dumps({"data": rows}), encoding="utf-8")
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    ds = load_qa_dataset(str(path))
    assert ds.features == QA_FEATURES
    assert ds.to_list() == rows
    assert load_qa_dataset(str(path), limit=2)["id"] == ["q0", "q1"]


def test_minimal_rows_get_defaults(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "min.jsonl", [{"id": "a", "question": "q?", "answers": ["x"]}])
    row = load_qa_dataset(str(path))[0]
    assert row["options"] == [] and row["answer_index"] == -1 and row["metadata"] == "{}"


def test_bad_row_names_file_and_row(tmp_path: Path) -> None:
    rows = _rows()
    rows[1]["answers"] = []
    path = _write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError, match=r"bad\.jsonl, row 2: 'answers' must be a non-empty list"):
        load_qa_dataset(str(path))


def test_row_missing_column_names_it(tmp_path: Path) -> None:
    rows = _rows()
    del rows[2]["question"]
    path = _write_jsonl(tmp_path / "gap.jsonl", rows)
    with pytest.raises(DataError, match=r"gap\.jsonl, row 3: no column 'question': name the column .* data\.fields"):
        load_qa_dataset(str(path))


def test_invalid_json_line_and_unreadable_files(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(_rows(1)[0]) + "\n\n{oops\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"broken\.jsonl: line 3: invalid JSON"):
        load_qa_dataset(str(path))
    with pytest.raises(DataError, match=r"absent\.jsonl: no such data file"):
        load_qa_dataset(str(tmp_path / "absent.jsonl"))
    fake_parquet = tmp_path / "fake.parquet"
    fake_parquet.write_text("not parquet", encoding="utf-8")
    with pytest.raises(DataError, match=r"fake\.parquet: cannot read Parquet"):
        load_qa_dataset(str(fake_parquet))
    scalar = tmp_path / "scalar.json"
    scalar.write_text("42", encoding="utf-8")
    with pytest.raises(DataError, match="expected a JSON list of rows"):
        read_rows(scalar)
    with pytest.raises(DataError, match="holds no rows"):
        load_qa_dataset(str(_write_jsonl(tmp_path / "empty.jsonl", [])))


def test_a_fifo_or_a_directory_is_named_for_what_it_is_and_never_read(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)  # reading it would block until a writer came
    with pytest.raises(DataError) as err:
        read_rows(fifo)
    assert str(err.value) == f"{fifo}: is a FIFO (named pipe), not a regular file"  # was "no such file"
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(DataError, match=r"dir\.json: is a directory, not a regular file"):
        read_rows(tmp_path / "dir.json")


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_numbers_python_cannot_read_are_one_line(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"huge{suffix}"
    body = '{"id": ' + "9" * 5000 + ', "question": "q?", "answers": ["a"]}'
    path.write_text(body + "\n" if suffix == ".jsonl" else f"[{body}]")
    with pytest.raises(DataError) as err:
        read_rows(path)
    message = str(err.value)
    assert "a JSON number Python cannot read" in message and "99999" not in message and "\n" not in message


def test_saved_dataset_dir_is_a_source(tmp_path: Path) -> None:
    dd = build_wikiqa(fake_articles(), seed=0)
    save_dataset_dict(dd, tmp_path / "wq")
    ds = load_qa_dataset(str(tmp_path / "wq"), "calib", limit=2)
    assert ds.to_list() == dd["calib"].select(range(2)).to_list()
    with pytest.raises(DataError, match="choose a split"):
        load_qa_dataset(str(tmp_path / "wq"))


def test_bad_limit() -> None:
    with pytest.raises(ValueError, match="limit"):
        load_qa_dataset("nq_open", limit=0)


# ------------------------------------------------------------------------------------------ hub sources


def test_unknown_dataset_lists_known_names() -> None:
    for source in ("squad", "hub:squad"):
        with pytest.raises(DataError) as info:
            load_qa_dataset(source)
        message = str(info.value)
        for name in ("nq_open", "trivia_qa", "hotpot_qa", "medmcqa", "pubmed_qa", "fever"):
            assert name in message


@pytest.mark.parametrize("source", ["nq_open", "hub:hotpot_qa", "hub:mandarjoshi/trivia_qa"])
def test_hub_offline_fails_fast_with_clear_error(source: str) -> None:
    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # set by tests/conftest.py
    start = time.monotonic()
    with pytest.raises(DataError, match="HF_HUB_OFFLINE is set") as info:
        load_qa_dataset(source)
    assert time.monotonic() - start < 20
    assert str(info.value).startswith("hub:")
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------------------ raw hub formats


def test_nq_open_mapper() -> None:
    ds = load_raw_local("nq_open", FIXTURES / "nq_open.jsonl")
    assert ds.num_rows == 4
    assert ds[0]["id"] == "nq_open-validation-0"
    assert ds[0]["answers"] == ["Michelangelo", "Michelangelo Buonarroti"]
    assert ds[3]["answers"] == ["the Tigris", "Tigris"]
    assert json.loads(ds[2]["metadata"])["dataset"] == "nq_open"


def test_trivia_qa_mapper_puts_value_first_then_aliases() -> None:
    ds = load_raw_local("trivia_qa", FIXTURES / "trivia_qa.jsonl", split="train")
    assert ds["id"] == ["tc_101", "qb_2002", "odql_303"]
    assert ds[0]["answers"] == ["Mars", "Planet Mars", "Fourth planet"]
    assert ds[1]["answers"] == ["Mali", "Republic of Mali"]  # value first, duplicate alias dropped
    assert ds[2]["answers"] == ["7", "seven"]
    assert json.loads(ds[0]["metadata"])["split"] == "train"


def test_hotpot_qa_mapper_builds_supporting_passages() -> None:
    ds = load_raw_local("hotpot_qa", FIXTURES / "hotpot_qa.jsonl")
    first = ds[0]
    assert first["answers"] == ["Amsterdam"]
    assert first["supporting_facts"] == ["The Night Watch", "Rijksmuseum"]
    assert first["gold_passages"][0] == {
        "doc_id": "The Night Watch",
        "title": "The Night Watch",
        "text": "The Night Watch is a 1642 painting by Rembrandt. It is on display in the Rijksmuseum.",
    }
    meta = json.loads(first["metadata"])
    assert meta["type"] == "bridge" and meta["level"] == "easy"
    assert meta["supporting_sentences"] == [["The Night Watch", 1], ["Rijksmuseum", 0]]
    assert ds[2]["supporting_facts"] == ["The Four Seasons (Vivaldi)", "Antonio Vivaldi"]  # deduplicated


def test_medmcqa_mapper_options_and_skips_unlabelled() -> None:
    ds = load_raw_local("medmcqa", FIXTURES / "medmcqa.jsonl")
    assert ds.num_rows == 3  # the cop = -1 row is dropped
    first = ds[0]
    assert first["options"] == ["Vitamin A", "Vitamin B12", "Vitamin C", "Vitamin D"]
    assert first["answer_index"] == 2 and first["answers"] == ["Vitamin C"]
    assert "ascorbic acid" in first["gold_passages"][0]["text"]
    assert ds[1]["answers"] == ["Femur"] and ds[1]["gold_passages"] == []  # exp is null
    assert json.loads(ds[2]["metadata"])["subject"] == "Physiology"


def test_pubmed_qa_mapper() -> None:
    ds = load_raw_local("pubmed_qa", FIXTURES / "pubmed_qa.jsonl")
    assert ds["answers"] == [["yes"], ["no"], ["maybe"]]
    assert ds["answer_index"] == [0, 1, 2]
    assert ds[0]["options"] == ["yes", "no", "maybe"]
    assert ds[0]["id"] == "pubmed_qa-21645374"
    assert ds[0]["gold_passages"][0]["text"].startswith("Hypertension is common in older adults. We followed")
    assert json.loads(ds[1]["metadata"])["long_answer"].startswith("Coffee intake")


def test_fever_mapper_groups_evidence_rows_by_claim() -> None:
    ds = load_raw_local("fever", FIXTURES / "fever.jsonl")
    assert ds["id"] == ["fever-75397", "fever-150448", "fever-214861"]
    assert ds["question"][0] == "The Eiffel Tower is located in Paris."
    assert ds["answers"] == [["SUPPORTS"], ["REFUTES"], ["NOT ENOUGH INFO"]]
    assert ds["answer_index"] == [0, 1, 2]
    assert ds[0]["options"] == ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"]
    assert ds[0]["supporting_facts"] == ["Eiffel Tower", "Paris"]
    assert ds[2]["supporting_facts"] == []
    assert json.loads(ds[0]["metadata"])["evidence"] == [["Eiffel_Tower", 0], ["Paris", 3]]


def test_raw_row_missing_field_names_row(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (FIXTURES / "hotpot_qa.jsonl").read_text().splitlines()]
    del rows[1]["supporting_facts"]
    path = _write_jsonl(tmp_path / "hotpot.jsonl", rows)
    with pytest.raises(DataError, match=r"hotpot\.jsonl: row 2: missing raw field\(s\) 'supporting_facts'"):
        load_raw_local("hotpot_qa", path)


def test_raw_bad_label_and_limit(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "fever.jsonl", [{"id": 1, "label": "MAYBE", "claim": "x"}])
    with pytest.raises(DataError, match="row 1: 'label' must be one of"):
        load_raw_local("fever", path)
    assert load_raw_local("nq_open", FIXTURES / "nq_open.jsonl", limit=2).num_rows == 2
    with pytest.raises(DataError, match="unknown dataset 'nqopen'"):
        load_raw_local("nqopen", FIXTURES / "nq_open.jsonl")
