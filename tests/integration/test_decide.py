"""``workbench decide`` on a finished tiny run: τ chosen after the run from the stored scores, measured on the held-out
split and shipped as a new bundle version whose manifest — and every reader of it — says decide set τ, on which
questions, and what it does on the held-out ones."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.bundle_run import build_tiny_run

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_lm_long_dir, tiny_encoder_dir):
    tmp = tmp_path_factory.mktemp("decide")
    build_tiny_run(tmp, tiny_lm_long_dir, tiny_encoder_dir, "evaluate.methods=[no_rag,standard_rag,d2rag]")
    return tmp


def _decide(tmp, *args: str):
    from workbench.cli import app

    result = CliRunner().invoke(app, ["decide", str(tmp / "run"), *args, "--dir", str(tmp / "bundles")])
    return result


def _manifest(tmp, version: str) -> dict:
    return json.loads((tmp / "bundles" / "tiny" / version / "manifest.json").read_text())


def _stages(tmp):
    return tmp / "run" / "stages"


def test_decide_at_a_retrieval_rate_ships_a_new_version_that_says_how_tau_was_set(tiny_run):
    from workbench.data.article_splits import ids_sha256
    from workbench.runtime import load_bundle

    stages = _stages(tiny_run)
    selection_before = (stages / "classify" / "selection.json").read_text()
    result = _decide(tiny_run, "--retrieval-rate", "0.3", "--no-archive")
    assert result.exit_code == 0, result.output
    assert "decided: " in result.output and "held out (test" in result.output and "tiny 1.0.1 written" in result.output
    manifest = _manifest(tiny_run, "1.0.1")
    record = manifest["metrics"]["decide"]
    tau = manifest["decision"]["tau"]
    assert record["request"] == "--retrieval-rate 0.3" and record["chosen_on"]["out_of_fold_rate"] <= 0.3
    assert manifest["decision"]["rule"].startswith("decide: retrieval rate ≤ 0.3 on calib")
    # chosen on the fit split's questions, never the held-out ones; measured on the held-out split
    calibrated = json.loads((stages / "calibrate" / "calibrated.json").read_text())
    fitted = manifest["provenance"]["fitted"]["decision.tau"]
    assert fitted["set_by"] == "decide" and fitted["split"] == "calib"
    assert fitted["ids_sha256"] == ids_sha256(calibrated["calib"]["id"]) and fitted["source"] == record["request"]
    assert manifest["provenance"]["held_out"]["decision"]["split"] == "test"
    # the held-out figures are the stored predictions routed at the new τ
    p_test = np.asarray(json.loads((stages / "classify" / "predictions.json").read_text())["Router"])
    routing = manifest["metrics"]["routing"]
    row = next(r for r in routing["rows"] if r["router"] == routing["chosen"])
    assert routing["shipped_by"] == "decide" and routing["chosen"].endswith("(decide)")
    assert row["retrieval_rate"] == pytest.approx((p_test < tau).mean())
    held = record["held_out"]
    assert held["rate"] == pytest.approx(row["retrieval_rate"]) and held["quality"] == pytest.approx(row["contains"])
    lo, hi = held["difference_interval"]
    assert lo <= held["difference"] <= hi
    # d2rag's end-to-end evaluate figures were measured at classify's τ: left out, and the manifest says so
    assert (
        "d2rag" not in manifest["metrics"]["evaluate"]["methods"]
        and "no_rag" in manifest["metrics"]["evaluate"]["methods"]
    )
    assert "d2rag" not in manifest["provenance"]["evaluated"]
    assert any("workbench decide --retrieval-rate 0.3" in note for note in manifest["notes"])
    # the bundle loads and decides at the new τ; the run itself is as it was
    runtime = load_bundle(tiny_run / "bundles" / "tiny" / "1.0.1")
    assert runtime.policy.tau == pytest.approx(tau)
    assert (stages / "classify" / "selection.json").read_text() == selection_before
    assert _manifest(tiny_run, "1.0.0")["provenance"]["fitted"]["decision.tau"]["set_by"] == "classify"


def test_every_reader_renders_decides_record(tiny_run):
    """The model card, `workbench bundles`, serve's GET /methods and `workbench infer` show the same decision: the τ
    decide set (not classify's), who set it and on what, and the held-out figures at that τ."""
    from fastapi.testclient import TestClient

    from workbench.bundle.shipped import decision_line, shipped_decision
    from workbench.cli import app
    from workbench.core.formatting import fmt
    from workbench.runtime import load_bundle
    from workbench.serve import create_app

    result = _decide(tiny_run, "--retrieval-rate", "0.5", "--version", "2.0.0")
    assert result.exit_code == 0, result.output
    bundle = tiny_run / "bundles" / "tiny" / "2.0.0"
    manifest = json.loads((bundle / "manifest.json").read_text())
    decision = shipped_decision(manifest)
    line = decision_line(decision)
    classify_tau = json.loads((_stages(tiny_run) / "classify" / "selection.json").read_text())["router"]["tau"]
    assert decision.tau.value != classify_tau and decision.tau.set_by == "decide" and decision.tau.split == "calib"
    assert decision.held_out is not None and decision.held_out.row.endswith("(decide)")
    card = (bundle / "README.md").read_text()
    assert line in card and "(classify's τ; `workbench decide` replaced it)" in card
    listing = CliRunner().invoke(app, ["bundles", "--dir", str(tiny_run / "bundles"), "--wide"])
    assert listing.exit_code == 0, listing.output
    row = next(r for r in listing.output.splitlines() if " 2.0.0 " in r)
    assert fmt(decision.tau.value) in row and "decide on calib" in row
    methods = TestClient(create_app(load_bundle(bundle))).get("/methods").json()
    assert methods["decision"]["summary"] == line and methods["decision"]["tau_origin"]["set_by"] == "decide"
    answered = CliRunner().invoke(app, ["infer", "--bundle", str(bundle), "--method", "d2rag", "Who wrote Hamlet?"])
    assert answered.exit_code == 0, answered.output
    assert line in answered.output and f"vs τ {decision.tau.value:.3f}" in answered.output


def test_a_tau_by_hand_records_no_split_and_cautions(tiny_run):
    from workbench.bundle.shipped import decision_line, shipped_decision

    result = _decide(tiny_run, "--tau", "0.4", "--version", "3.0.0", "--no-archive")
    assert result.exit_code == 0, result.output
    assert "note: τ was given by hand" in result.output
    manifest = _manifest(tiny_run, "3.0.0")
    fitted = manifest["provenance"]["fitted"]["decision.tau"]
    assert fitted["set_by"] == "decide" and fitted["split"] is None and fitted["source"] == "--tau 0.4, by hand"
    assert manifest["decision"]["tau"] == 0.4 and manifest["metrics"]["decide"]["chosen_on"] is None
    assert "τ set by decide (--tau 0.4, by hand)" in decision_line(shipped_decision(manifest))
    assert any("held-out figures at it were in view" in note for note in manifest["notes"])


def test_another_pick_rule_refits_the_router_it_picks_on_the_fit_split(tiny_run):
    router = json.loads((_stages(tiny_run) / "classify" / "router.json").read_text())
    shipped = router["spec"]
    # under 123 tokens a question the best router on the fit split's front is LR(dtr_nll) (0.593 at 120.7 tokens;
    # LR(dtr_nll+confidence), classify's, needs 125.8 for its next point up)
    result = _decide(tiny_run, "--pick", "max_quality_under", "--max-tokens", "123", "--version", "4.0.0")
    assert result.exit_code == 0, result.output
    manifest = _manifest(tiny_run, "4.0.0")
    pick = manifest["metrics"]["decide"]["pick"]
    assert pick["rule"] == "max_quality_under" and pick["max_tokens"] == 123.0 and pick["met"]
    assert "entropy" not in manifest["decision"]["features"] and manifest["decision"]["tau"] <= 1.0
    # here the pick is another router than classify's (dtr_nll against dtr_nll + confidence): refitted on calib
    assert manifest["decision"]["features"] == ["dtr_nll"] != shipped["features"]
    fitted = manifest["provenance"]["fitted"]
    for part in ("decision.classifier", "decision.calibrators", "decision.tau"):
        assert fitted[part]["set_by"] == "decide" and fitted[part]["split"] == "calib", part
    assert manifest["decision"]["rule"].startswith("decide: router pick")
    from workbench.runtime import load_bundle

    runtime = load_bundle(tiny_run / "bundles" / "tiny" / "4.0.0")
    assert list(runtime.policy.calibrators.features) == manifest["decision"]["features"]


def _refused(monkeypatch, capsys, *args: str) -> str:
    """``workbench decide *args`` through the console entry point: it must exit 2 with one error line."""
    import sys

    from workbench import cli

    monkeypatch.setattr(sys, "argv", ["workbench", "decide", *args])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_decide_refuses_bad_requests_and_runs_without_a_router(tiny_run, tmp_path, monkeypatch, capsys):
    run, out = str(tiny_run / "run"), str(tmp_path / "b")
    both = _refused(monkeypatch, capsys, run, "--tau", "0.3", "--pick", "best_quality", "--dir", out)
    assert "give exactly one of --tau, --retrieval-rate or --pick" in both
    assert "--pick: max_quality_under needs a budget" in _refused(
        monkeypatch, capsys, run, "--pick", "max_quality_under", "--dir", out
    )
    stray = _refused(monkeypatch, capsys, run, "--retrieval-rate", "0.3", "--max-tokens", "5", "--dir", out)
    assert "--max-tokens is a parameter of --pick" in stray
    assert "--tau: must be a number in [0, 1]" in _refused(monkeypatch, capsys, run, "--tau", "1.5", "--dir", out)
    copy = tmp_path / "run"
    shutil.copytree(tiny_run / "run", copy)
    selection = copy / "stages" / "classify" / "selection.json"
    record = json.loads(selection.read_text())
    record.pop("router")
    selection.write_text(json.dumps(record))
    assert "classify.router_search: none" in _refused(monkeypatch, capsys, str(copy), "--tau", "0.3", "--dir", out)
    assert not (tmp_path / "b").exists()  # nothing written
