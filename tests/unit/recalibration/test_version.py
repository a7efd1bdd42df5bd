"""A recalibration written as a new bundle version beside its parent (workbench/recalibration/version.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import sys

import numpy as np
import pytest

from workbench.bundle.integrity import verify_bundle_dir
from workbench.core.errors import DataError
from workbench.recalibration import version as version_module
from workbench.recalibration.compare import recalibrate
from workbench.recalibration.feedback import read_feedback
from workbench.recalibration.version import bundle_calibrators, write_version
from workbench.runtime import load_bundle

from .feedback_data import TINY, shifted_rows, write_jsonl


@pytest.fixture(scope="module")
def refit(tmp_path_factory):
    """The tiny bundle copied as ``tiny/1.0.0``, shifted feedback, and its recalibration."""
    root = tmp_path_factory.mktemp("bundles")
    parent = shutil.copytree(TINY, root / "tiny" / "1.0.0")
    feedback = write_jsonl(root / "feedback.jsonl", shifted_rows(200))
    _, calibrators = bundle_calibrators(parent)
    result = recalibrate(calibrators, read_feedback(feedback, calibrators.features), n_resamples=20)
    return parent, feedback, result


def test_new_version_loads_verifies_and_answers_with_the_refit(refit):
    parent, feedback, result = refit
    written = write_version(parent, result, feedback, holdout=0.3, seed=0, forced=False)
    assert written == parent.parent / "1.1.0"
    manifest = verify_bundle_dir(written)
    block = manifest["recalibration"]
    assert block["parent"] == "1.0.0" and manifest["version"] == "1.1.0" and manifest["schema_version"] == "1.7"
    assert block["feedback_sha256"] == hashlib.sha256(feedback.read_bytes()).hexdigest()
    assert block["metrics"]["mean_ece"] == result.metrics["mean_ece"] and block["holdout_rows"] == result.holdout_rows
    _, shipped = bundle_calibrators(written)
    assert shipped.to_dict() == result.calibrators.to_dict()
    runtime = load_bundle(written)  # the runtime's own checks: digests, numpy / ONNX agreement on raw points
    assert runtime.version == "1.1.0"
    onnx = load_bundle(written, {"classifier": "onnx"})
    probe = {f: float(np.mean(shipped.ranges[f])) for f in shipped.features}
    u = result.calibrators.transform([result.calibrators.clean(probe)[0]])[0]
    decision = runtime.decide(probe)
    assert np.allclose(decision.calibrated, u) and abs(onnx.decide(probe).p_correct - decision.p_correct) < 1e-5
    _, own = bundle_calibrators(parent)
    assert not np.allclose(own.transform([own.clean(probe)[0]])[0], u)  # the parent keeps its own calibrators
    second = write_version(parent, result, feedback, holdout=0.3, seed=0, forced=False)
    assert second.name == "1.2.0" and (parent.parent / "1.1.0" / "manifest.json").is_file()


def test_a_failed_write_leaves_nothing(refit, tmp_path, monkeypatch):
    parent, feedback, result = refit
    out = tmp_path / "out"

    def broken(*args, **kwargs):
        raise DataError("the graph cannot be built", "test")

    monkeypatch.setattr(version_module, "export_decision_onnx", broken)
    with pytest.raises(DataError, match="the graph cannot be built"):
        write_version(parent, result, feedback, holdout=0.3, seed=0, forced=False, out=out)
    assert list(out.iterdir()) == []


def test_a_tampered_parent_is_refused(refit, tmp_path):
    parent, feedback, result = refit
    copy = shutil.copytree(parent, tmp_path / "tiny" / "1.0.0")
    (copy / "learned" / "classifier.json").write_text("{}")
    with pytest.raises(DataError, match=r"classifier\.json"):
        write_version(copy, result, feedback, holdout=0.3, seed=0, forced=False)
    assert sorted(p.name for p in copy.parent.iterdir()) == ["1.0.0"]


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``workbench recalibrate *args`` through the console entry point."""
    from workbench import cli

    monkeypatch.setattr(sys, "argv", ["workbench", "recalibrate", *args])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    out = capsys.readouterr()
    return int(exit_.value.code or 0), out.out, out.err


def test_cli_writes_the_version_or_refuses_in_one_line(tmp_path, monkeypatch, capsys):
    parent = shutil.copytree(TINY, tmp_path / "tiny" / "1.0.0")
    rows = shifted_rows(200)
    feedback = write_jsonl(tmp_path / "feedback.jsonl", rows)
    code, out, err = run_cli(monkeypatch, capsys, "--bundle", str(parent), "--feedback", str(feedback))
    assert code == 0 and "mean ECE" in out and f"wrote {parent.parent / '1.1.0'}" in out, err
    assert verify_bundle_dir(parent.parent / "1.1.0")["recalibration"]["forced"] is False
    small = write_jsonl(tmp_path / "small.jsonl", rows[:40])
    code, out, err = run_cli(monkeypatch, capsys, "--bundle", str(parent), "--feedback", str(small))
    assert code == 2 and err.startswith(f"error: {small}: the held-out part") and err.count("\n") == 1
    rows[5]["label"] = 3
    bad = write_jsonl(tmp_path / "bad.jsonl", rows)
    code, _, err = run_cli(monkeypatch, capsys, "--bundle", str(parent), "--feedback", str(bad))
    assert code == 2 and f"{bad}: row 6: field 'label' must be 0 or 1" in err
    # nothing written by a refusal; the version's archive beside it
    assert sorted(p.name for p in parent.parent.iterdir()) == ["1.0.0", "1.1.0", "tiny-1.1.0.tar.gz"]


def test_the_recalibration_block_is_checked_on_load(refit, tmp_path):
    from tests.unit.bundle.test_bundle_attacks import _reseal

    parent, feedback, result = refit
    written = write_version(parent, result, feedback, holdout=0.3, seed=0, forced=False, out=tmp_path / "tiny")
    manifest = json.loads((written / "manifest.json").read_text())
    manifest["recalibration"]["holdout"] = 2.0
    _reseal(written, manifest)
    with pytest.raises(DataError, match=r"'recalibration.holdout' must be between 0 and 1"):
        verify_bundle_dir(written)


def test_a_recalibration_without_fit_rows_keeps_the_monitoring_reference(refit, tmp_path):
    """A :class:`Recalibration` made without the fit part's rows (by hand) has nothing to describe: the parent's
    reference stays (test_refit.py: with them, it is rebuilt)."""
    from tests.unit.monitoring.bundles import bundle_with_reference

    _, feedback, result = refit
    parent = bundle_with_reference(tmp_path / "tiny" / "1.0.0", tuple(result.calibrators.features))
    result = dataclasses.replace(result, fit_features=None)
    written = write_version(parent, result, feedback, holdout=0.3, seed=0, forced=False)
    manifest = load_bundle(written).manifest
    assert manifest["monitoring"] == verify_bundle_dir(parent)["monitoring"]
    assert (written / "monitoring" / "reference.json").read_bytes() == (
        parent / "monitoring" / "reference.json"
    ).read_bytes()
    assert "recalibrated from 1.0.0" in manifest["notes"][-1]
