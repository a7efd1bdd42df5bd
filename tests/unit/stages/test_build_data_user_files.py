"""build_data on a user's own files (field mapping, split column, default fractions that follow the stages), the data
section's load checks, `workbench validate` opening the files, `workbench cp custom`, the bundle's corpus mapping."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.helpdesk_data import CORPUS_FIELDS, helpdesk_overrides, question_rows, write_helpdesk
from workbench.core.errors import ConfigError, DataError
from workbench.data.dataset_store import load_saved_dataset_dict
from workbench.recipe import load_recipe
from workbench.stages.build_data import run as build_data

CUSTOM_STAGES = "stages=[build_data,answer,collect,calibrate,classify,export,report]"


def wb(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


@pytest.fixture
def helpdesk(tmp_path):
    return write_helpdesk(tmp_path, per_kind=6)


def _build(tmp_path: Path, overrides: list[str]) -> tuple[dict, Path]:
    config = load_recipe("custom", overrides).config
    out = tmp_path / f"build-{len(list(tmp_path.glob('build-*')))}"
    out.mkdir()
    summary = build_data.run(SimpleNamespace(config=config, out_dir=out, log=logging.getLogger("test.build_data")))
    return summary, out


def test_default_fractions_follow_the_stages_that_run(helpdesk):
    questions, corpus = helpdesk
    files = [f"data.dataset={questions}", f"data.corpus={corpus}"]
    # the custom recipe reads calib (collect, calibrate) and test (answer, collect); its OOD threshold needs no val
    assert load_recipe("custom", files).config.data.fractions == [0.0, 0.5, 0.0, 0.5]
    assert load_recipe("custom", [*files, "calibrate.ood_split=val"]).config.data.fractions == [0.0, 0.4, 0.2, 0.4]
    assert load_recipe("custom", [*files, "stages=[build_data]"]).config.data.fractions == [0.5, 0.2, 0.1, 0.2]
    assert load_recipe("custom", [*files, "data.fractions=[0, 0.3, 0, 0.7]"]).config.data.fractions == [0, 0.3, 0, 0.7]
    assert load_recipe("quickstart").config.data.fractions == [0.5, 0.2, 0.1, 0.2]  # wiki-qa keeps its split
    assert load_recipe("custom", helpdesk_overrides(questions, corpus)).config.data.fractions is None


def test_a_user_file_split_by_default_fractions_sends_nothing_to_an_unread_split(tmp_path, helpdesk):
    questions, corpus = helpdesk
    summary, _ = _build(tmp_path, [f"data.dataset={questions}", f"data.corpus={corpus}", *_mapping()])
    assert {s: summary[f"n_{s}"] for s in ("train", "calib", "val", "test")} == {
        "train": 0,
        "calib": 6,
        "val": 0,
        "test": 6,
    }


def _mapping() -> list[str]:
    return [
        "data.fields={id: ticket_id, question: subject, answers: resolution, gold_passages: gold_doc, template: kind}",
        f"data.corpus_fields={CORPUS_FIELDS}",
    ]


def test_the_split_column_mapping_and_the_columns_said_in_one_line(tmp_path, helpdesk, caplog):
    questions, corpus = helpdesk
    with caplog.at_level(logging.INFO, logger="test.build_data"):
        summary, out = _build(tmp_path, helpdesk_overrides(questions, corpus))
    assert (summary["n_train"], summary["n_calib"], summary["n_val"], summary["n_test"]) == (0, 8, 0, 4)
    qa = load_saved_dataset_dict(out / "qa")
    by_id = {row["id"]: row for split in qa.values() for row in split}
    holdout = {str(r["ticket_id"]) for r in question_rows(6) if r["split"] == "holdout"}
    assert set(qa["test"]["id"]) == holdout and len(by_id) == 12
    oslo = by_id["1000"]
    assert oslo["question"] == "What is the door code of the Oslo office?" and oslo["answers"] == ["4100"]
    assert oslo["gold_passages"][0]["doc_id"] == "100" and "4100" in oslo["gold_passages"][0]["text"]
    assert json.loads(oslo["metadata"]) == {"template": "company", "priority": "high"}  # no 'split'
    import datasets

    passages = datasets.load_from_disk(str(out / "corpus"))
    assert passages[0]["doc_id"] == "100" and passages[0]["title"] == "Oslo office access"
    assert passages[0]["topic"] == "facilities" and passages[0]["chunk_id"] == "100#0"
    said = [r.getMessage() for r in caplog.records]
    assert any(m.endswith("column(s) priority are no QA field: kept in each question's metadata") for m in said)
    assert any("column(s) updated are no passage field (doc_id, title, text, topic): dropped" in m for m in said)


def test_a_split_a_stage_reads_that_gets_no_questions_is_refused(tmp_path, helpdesk):
    questions, corpus = helpdesk
    overrides = [*helpdesk_overrides(questions, corpus), "data.split_names={dev: calib, holdout: calib}"]
    with pytest.raises(DataError) as err:
        _build(tmp_path, overrides)
    assert str(err.value) == (
        f"{questions}: split 'test', which answer reads (answer.split), gets no questions: no row's 'split' "
        "(data.split_column) names it"
    )
    few = tmp_path / "few.jsonl"
    few.write_text("".join(json.dumps(r) + "\n" for r in question_rows(6)[:1]))
    with pytest.raises(DataError, match=r"split 'calib', which collect reads \(collect\.splits\), gets no questions: "):
        _build(tmp_path, [f"data.dataset={few}", f"data.corpus={corpus}", *_mapping()])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.fields={id: ticket_id}", "data.dataset=wiki-qa"], "data.fields: applies to your own"),
        (["data.split_column=split", "data.fractions=[0, 0.5, 0, 0.5]"], "data.fractions: data.split_column gives"),
        (["data.split_names={dev: calib}"], "data.split_names: maps values of data.split_column: set that too"),
        (["data.split_column=split", "data.split_names={dev: training}"], "data.split_names.dev: must map"),
        (["data.fields={ticket: id}"], "data.fields: unknown field(s) 'ticket'"),
        (["data.corpus_fields={doc_id: id}", "data.corpus=wiki"], "data.corpus_fields: applies to your own corpus"),
        (["data.corpus_fields={body: text}"], "data.corpus_fields: unknown field(s) 'body'"),
    ],
)
def test_the_data_sections_keys_are_checked_at_load(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_recipe("custom", overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_validate_opens_the_files_and_names_file_and_row(tmp_path, helpdesk):
    questions, corpus = helpdesk
    ok = wb("validate", "custom", *helpdesk_overrides(questions, corpus))
    assert ok.returncode == 0, ok.stderr
    assert f"corpus {corpus}: 12 documents; dropped: updated" in ok.stdout
    assert f"dataset {questions}: 12 questions (every row checked); calib 8, test 4; kept in metadata: priority" in (
        ok.stdout
    )
    absent = wb("validate", "custom", f"data.dataset={tmp_path}/absent.jsonl", f"data.corpus={corpus}")
    assert absent.returncode == 2 and absent.stderr.strip() == f"error: {tmp_path}/absent.jsonl: no such data file"


def _checked(overrides: list[str]) -> list[str]:
    """What `workbench validate` checks of the data files, in process."""
    return build_data.check_data_files(load_recipe("custom", overrides).config)


def test_validate_checks_the_first_rows_after_mapping_and_every_rows_split(tmp_path, helpdesk, monkeypatch):
    questions, corpus = helpdesk
    rows = question_rows(6)
    del rows[2]["resolution"]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError) as err:
        _checked(helpdesk_overrides(questions, corpus))
    assert str(err.value) == f"{questions}, row 3: no column 'resolution' (data.fields.answers)"
    monkeypatch.setattr(build_data, "VALIDATE_ROWS", 2)  # row 3 is past the rows checked; its split is still read
    assert (
        "12 questions (the first 2 rows checked); calib 8, test 4" in _checked(helpdesk_overrides(questions, corpus))[1]
    )
    with pytest.raises(DataError, match=r"split 'test', which answer reads \(answer\.split\), gets no questions"):
        _checked([*helpdesk_overrides(questions, corpus), "data.split_names={dev: calib, holdout: calib}"])
    with pytest.raises(DataError, match="unknown dataset source"):
        _checked([f"data.dataset={tmp_path}/questions.csv", f"data.corpus={corpus}"])
    assert build_data.check_data_files(load_recipe("quickstart").config) == []  # nothing of the user's to open


def test_cp_custom_copies_a_commented_recipe_that_names_no_wiki_setting(tmp_path):
    listed = wb("ls")
    assert listed.returncode == 0 and "custom" in listed.stdout
    out = wb("cp", "custom", str(tmp_path))
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "custom.yaml").read_text()
    assert "wiki" not in text.lower() and "templates" not in text and "ood_topics" not in text
    # as copied, it names files the user has yet to write: validate says which
    refused = wb("validate", str(tmp_path / "custom.yaml"), cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.strip() == "error: my_questions.jsonl: no such data file"


def test_the_data_sections_new_keys_leave_stage_keys_alone_at_their_defaults(helpdesk):
    from workbench.core.config import to_plain
    from workbench.stages.runner import _keyed_section

    plain = to_plain(load_recipe("quickstart").config)["data"]
    assert not {"fields", "corpus_fields", "split_column", "split_names"} & set(_keyed_section("data", plain))
    questions, corpus = helpdesk
    mapped = to_plain(load_recipe("custom", helpdesk_overrides(questions, corpus)).config)["data"]
    assert {"fields", "corpus_fields", "split_column", "split_names"} <= set(_keyed_section("data", mapped))


def test_the_runtime_reads_a_bundles_corpus_through_its_mapping(helpdesk):
    from workbench.bundle.manifest import CorpusRecord
    from workbench.runtime.tools import runtime_corpus

    _, corpus = helpdesk
    fields = {"doc_id": "id", "title": "name", "text": "body", "topic": "category"}
    record = {"source": str(corpus), "chunking": "none", "chunk_size": 600, "chunk_overlap": 100, "fields": fields}
    columns = runtime_corpus({"corpus": record}, None, False, [])
    assert columns["doc_id"][:2] == ["100", "101"] and columns["title"][0] == "Oslo office access"
    with pytest.raises(DataError, match="no column 'doc_id'"):
        runtime_corpus({"corpus": {**record, "fields": None}}, None, False, [])
    with pytest.raises(ValueError, match=r"'corpus\.fields' must map field names to column names"):
        CorpusRecord(source="c", chunking="none", chunk_size=600, chunk_overlap=100, fields={"text": 3})
