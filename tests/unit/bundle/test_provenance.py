"""Issue 41, items 1 and 8 on the committed fixture (no model, no run): the manifest's ``provenance`` block is typed
and covered by the content digest; the export's held-out check refuses any overlap between what a bundle ships and
what its held-out figures were measured on; and the one record of what ships (``workbench.bundle.shipped``) is what
the model card, ``workbench bundles`` and the runtime's ``info()`` (``GET /methods``) render — an older bundle whose τ a
study moved shows no held-out figure rather than classify's."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench.bundle.card import model_card
from workbench.bundle.catalog import list_bundles
from workbench.bundle.manifest import check_manifest, content_digest
from workbench.bundle.provenance import (
    Questions,
    check_held_out,
    check_reader_articles,
    question_record,
    recorded_questions,
    records,
)
from workbench.bundle.shipped import decision_line, shipped_decision
from workbench.cli import app
from workbench.core.errors import ConfigError, DataError
from workbench.data.article_splits import ids_sha256
from workbench.runtime import load_bundle

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "bundles" / "tiny" / "1.0.0"

FIT = frozenset({"c1", "c2", "c3"})
VAL = frozenset({"v1", "v2"})
TEST = frozenset({"t1", "t2", "t3", "t4"})


def _manifest() -> dict:
    return json.loads((FIXTURE / "manifest.json").read_text())


def _with_study_record(manifest: dict) -> dict:
    """The fixture's manifest as an export now writes it when a study moved τ: the provenance block, and the routing
    row at the shipped τ that ``chosen`` names."""
    manifest = copy.deepcopy(manifest)
    manifest["decision"]["tau"], manifest["decision"]["rule"] = 0.549, "study"
    routing = manifest["metrics"]["routing"]
    row = {**routing["rows"][-1], "router": "MLP at τ = 0.549 (study)", "retrieval_rate": 0.375, "contains": 0.7}
    routing.update(classify_pick=routing["chosen"], chosen=row["router"], shipped_by="study")
    routing["rows"].append(row)
    manifest["methods"]["d2rag"]["options"]["alpha_pos"] = 0.5
    fitted = {
        "decision.tau": Questions("study", "val", VAL),
        "d2rag.alpha_pos": Questions("study", "val", VAL),
        "d2rag.alpha_neg": Questions("default"),
        "decision.calibrators": Questions("calibrate", "calib", FIT),
    }
    held = {
        "decision": Questions("export", "test", TEST),
        "utility": Questions("fit_utility", "calib", FIT, out_of_fold=True),
    }
    manifest["provenance"] = {
        "fitted": records(fitted, "set_by"),
        "held_out": records(held, "measured_by"),
        "evaluated": {"d2rag": "ab" * 32},
    }
    return manifest


def _write(root: Path, manifest: dict) -> None:
    manifest["content_sha256"] = content_digest(manifest, manifest["files"])
    (root / "manifest.json").write_text(json.dumps(manifest))


# --------------------------------------------------------------------------------------------- the export's check
def test_a_part_fitted_on_held_out_questions_is_refused_naming_both():
    fitted = {"decision.tau": Questions("study", "test", frozenset({"t1", "x"}))}
    with pytest.raises(ConfigError) as err:
        check_held_out(fitted, {"evaluate": Questions("evaluate", "test", TEST)})
    message = str(err.value)
    assert message.startswith("export: decision.tau was fitted on 1 of the 4 questions the evaluate figures report")
    assert "(fitted on split 'test', measured on 'test')" in message and "\n" not in message


def test_disjoint_parts_out_of_fold_figures_and_unfitted_values_pass():
    fitted = {
        "decision.calibrators": Questions("calibrate", "calib", FIT),
        "utility": Questions("fit_utility", "calib", FIT),
        "d2rag.alpha_neg": Questions("default"),  # fitted on nothing
    }
    held = {
        "routing": Questions("classify", "test", TEST),
        "utility": Questions("fit_utility", "calib", FIT, out_of_fold=True),  # by design on its own fit questions
    }
    check_held_out(fitted, held)  # no error


def test_a_reader_adapter_trained_on_a_reported_split_or_leaking_articles_is_refused():
    reader = {"models.generator": Questions("tune_reader", "train", unit="articles", digest="a" * 64, count=10)}
    check_reader_articles(reader, {"evaluate": Questions("evaluate", "test", TEST)}, lambda: None)
    with pytest.raises(ConfigError, match=r"trained on the articles of split 'train', which the evaluate figures"):
        check_reader_articles(reader, {"evaluate": Questions("evaluate", "train", TEST)}, lambda: None)
    with pytest.raises(ConfigError, match=r"models.generator: 3 of its articles land in test, so held-out"):
        check_reader_articles(
            reader, {"evaluate": Questions("evaluate", "test", TEST)}, lambda: "3 of its articles land in test"
        )


def test_a_studys_record_round_trips_and_an_edited_one_is_refused():
    record = question_record("val", ["v2", "v1"])
    assert record == {"split": "val", "questions": 2, "ids_sha256": ids_sha256(["v1", "v2"]), "ids": ["v1", "v2"]}
    back = recorded_questions("params", record, "p.json", "p.json")
    assert back.split == "val" and back.ids == VAL and back.record("set_by")["ids_sha256"] == record["ids_sha256"]
    with pytest.raises(DataError, match=r"p.json: 'fitted_on.ids_sha256' is not the digest of its ids"):
        recorded_questions("params", {**record, "ids": ["v1", "t1"]}, "p.json", "p.json")
    with pytest.raises(DataError, match="must hold a split and the list of question ids"):
        recorded_questions("params", {"split": "val"}, "p.json", "p.json")


# ---------------------------------------------------------------------------------------- the manifest's block
def test_the_provenance_block_is_typed():
    fixture_notes = check_manifest(_manifest(), "m.json")  # the 1.0 fixture's own (its identity is not sealed)
    manifest = _with_study_record(_manifest())
    assert check_manifest(manifest, "m.json") == fixture_notes
    bad = copy.deepcopy(manifest)
    bad["provenance"]["fitted"]["decision.tau"]["ids_sha256"] = "not-hex"
    with pytest.raises(DataError, match=r"'provenance.\*.ids_sha256' must be 64 lowercase hex digits"):
        check_manifest(bad, "m.json")
    both = copy.deepcopy(manifest)
    both["provenance"]["held_out"]["decision"]["set_by"] = "study"
    with pytest.raises(DataError, match="names exactly one of 'set_by' and 'measured_by'"):
        check_manifest(both, "m.json")
    later = copy.deepcopy(manifest)
    later["provenance"]["fitted"]["decision.tau"]["seen_by"] = "a later minor's key"
    assert check_manifest(later, "m.json") == fixture_notes  # ignored, as unknown keys of a newer minor are


def test_an_edited_provenance_record_is_refused_at_load(tmp_path):
    root = Path(shutil.copytree(FIXTURE, tmp_path / "tiny" / "1.0.0"))
    manifest = _with_study_record(_manifest())
    _write(root, manifest)
    assert load_bundle(root).info()["decision"]["tau_origin"]["set_by"] == "study"
    manifest["provenance"]["fitted"]["decision.tau"]["split"] = "calib"  # edited without re-hashing
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="content_sha256 does not match"):
        load_bundle(root)


# ------------------------------------------------------------------------------------- one record, every reader
def test_every_reader_renders_the_manifests_record(tmp_path):
    root = Path(shutil.copytree(FIXTURE, tmp_path / "bundles" / "tiny" / "1.0.0"))
    manifest = _with_study_record(_manifest())
    _write(root, manifest)
    decision = shipped_decision(manifest)
    line = decision_line(decision)
    assert decision.tau.value == 0.549 and decision.tau.origin() == "study on `val`, 2 questions"
    assert decision.alphas["alpha_pos"].value == 0.5 and decision.alphas["alpha_neg"].set_by == "default"
    assert decision.held_out.retrieval_rate == 0.375 and decision.held_out.questions == 4
    assert "τ = 0.549" in line and "α_pos = 0.5 (study on `val`, 2 questions)" in line
    assert "retrieval rate 0.38, routed containment 0.700" in line
    card = model_card(manifest)
    assert line in card and "**MLP at τ = 0.549 (study)** (this bundle)" in card
    assert "MLP (classify's τ; the study replaced it)" in card
    assert "| `decision.tau` | study | `val` | 2 questions |" in card
    assert "| `utility` | fit_utility | `calib` (out of fold) | 3 questions |" in card
    (entry,) = list_bundles(tmp_path / "bundles")
    assert entry.metrics["tau"] == 0.549 and entry.metrics["tau_set_by"] == "study on val, 2 questions"
    assert entry.metrics["retrieval_rate"] == 0.375 and entry.metrics["routed_contains"] == 0.7
    assert entry.metrics["fitted_on"] == "val, calib" and entry.metrics["held_out"] == "test"
    wide = CliRunner().invoke(app, ["bundles", "--dir", str(tmp_path / "bundles"), "--wide"])
    assert wide.exit_code == 0, wide.output
    assert "τ set by" in wide.output and "study on val, 2 questions" in wide.output and "0.375" in wide.output
    info = load_bundle(root).info()["decision"]
    assert info["summary"] == line and info["tau"] == 0.549 and info["features"] == manifest["decision"]["features"]


def test_an_older_bundle_whose_tau_a_study_moved_shows_no_held_out_figure_at_it():
    manifest = _manifest()  # schema 1.0: no provenance, its routing row measured at classify's τ
    assert shipped_decision(manifest).held_out is not None  # classify's τ: its row is the shipped decision's
    manifest["decision"]["rule"] = "study"
    decision = shipped_decision(manifest)
    assert decision.tau.set_by == "study" and decision.held_out is None
    assert decision_line(decision).endswith("no held-out figure at this τ")


def test_the_embedded_reader_adapter_is_recorded_by_its_training_articles():
    from workbench.bundle.provenance import reader_adapter

    reader = reader_adapter("smollm2-reader")
    record = reader.record("set_by")
    assert record["set_by"] == "tune_reader" and record["split"] == "train" and record["unit"] == "articles"
    assert record["questions"] > 1000 and len(record["ids_sha256"]) == 64
    assert reader_adapter("smollm2") is None  # a model, not an adapter


def test_the_provenance_tables_count_one_question_in_the_singular():
    from workbench.bundle.shipped import provenance_lines

    record = {"split": "test", "questions": 1, "ids_sha256": "a" * 64, "measured_by": "evaluate"}
    articles = {"split": "train", "questions": 1, "ids_sha256": "b" * 64, "set_by": "tune_reader", "unit": "articles"}
    text = "\n".join(
        provenance_lines({"provenance": {"fitted": {"models.generator": articles}, "held_out": {"evaluate": record}}})
    )
    assert "| `evaluate` | evaluate | `test` | 1 question |" in text
    assert "| `models.generator` | tune_reader | `train` | 1 article |" in text
