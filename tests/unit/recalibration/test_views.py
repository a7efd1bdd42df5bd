"""What the card, ``workbench bundles`` and ``GET /methods`` show of a recalibrated version (workbench/bundle/shipped.py
read by card.py and catalog.py): a version whose τ was refitted shows its τ and its held-out feedback figures, never
its parent's routing row as its own; a calibrators-only version keeps the parent's row with a line saying the
calibrators were refitted on feedback."""

from __future__ import annotations

import shutil
import sys

import pytest

from workbench.bundle.integrity import verify_bundle_dir
from workbench.bundle.shipped import decision_line, decision_view, shipped_decision, tau_text
from workbench.core.formatting import fmt
from workbench.recalibration.compare import recalibrate
from workbench.recalibration.feedback import read_feedback
from workbench.recalibration.version import bundle_decision, write_version

from .feedback_data import TINY, shifted_rows, write_jsonl
from .test_refit import with_retrieval

PARENT_ROW = "held out (`test`"
"""How the fixture's own routing row (its `test` split, at its τ) starts in the decision line."""


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    """The tiny bundle as ``tiny/1.0.0`` and two recalibrations beside it: 1.1.0 with τ refitted, 1.2.0 with the
    calibrators only (both on the same feedback with label_retrieved)."""
    root = tmp_path_factory.mktemp("views")
    parent = shutil.copytree(TINY, root / "tiny" / "1.0.0")
    _, calibrators, decision = bundle_decision(parent)
    path = write_jsonl(root / "feedback.jsonl", with_retrieval(shifted_rows(200), 0.8))
    rows = read_feedback(path, calibrators.features)
    written = {}
    for key, refit in (("tau", ["tau"]), ("calibrators", [])):
        result = recalibrate(calibrators, rows, decision=decision, refit=["calibrators", *refit], n_resamples=20)
        written[key] = write_version(parent, result, path, holdout=0.3, seed=0, forced=False, archive=False)
    return parent, written


def run_bundles(monkeypatch, capsys, root) -> str:
    """``workbench bundles --dir root`` through the console entry point: its output."""
    from workbench import cli

    monkeypatch.setattr(sys, "argv", ["workbench", "bundles", "--dir", str(root)])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert not exit_.value.code
    return capsys.readouterr().out


def block(listing: str, version: str) -> str:
    """The ``key: value`` block of ``version`` in a ``workbench bundles`` listing."""
    return next(b for b in listing.split("\n\n") if f" version: {version}\n" in b)


def test_a_tau_refitted_version_shows_its_tau_and_the_feedback_figures_not_the_parents_row(versions):
    parent, written = versions
    manifest = verify_bundle_dir(written["tau"])
    routing = manifest["recalibration"]["metrics"]["routing"]
    decision = shipped_decision(manifest)
    assert decision.tau.value == routing["tau"]["after"] != routing["tau"]["before"]
    assert decision.held_out is None  # the parent's row is not this decision's
    line = decision_line(decision)
    after = fmt(routing["retrieval_rate"]["after"], 2), fmt(routing["quality"]["after"])
    assert f"τ = {tau_text(decision)}" in line and "τ set by recalibrate on `feedback`" in line
    assert f"measured on held-out feedback ({routing['rows']} rows;" in line and "recalibrated from 1.0.0" in line
    assert f"retrieval rate {after[0]}, routed quality {after[1]}" in line and PARENT_ROW not in line
    card = (written["tau"] / "README.md").read_text()
    assert line in card and "## Held-out feedback (this version)" in card
    assert f"| **this version** | {fmt(decision.tau.value)} | {after[0]} | {after[1]} [" in card
    assert "(1.0.0's decision, not this version's)" in card and "(this bundle)" not in card
    assert "## Held-out results (test split of 1.0.0's run)" in card
    view = decision_view(manifest)  # serve's GET /methods reads the same record
    assert view["summary"] == line and view["held_out"] is None and view["recalibrated"]["parent"] == "1.0.0"
    assert shipped_decision(verify_bundle_dir(parent)).held_out is not None  # the parent keeps its own row


def test_a_calibrators_only_version_keeps_the_parents_tau_but_shows_the_feedback_figures(versions):
    # new calibrators change what the router reads, so which questions retrieve: the parent's row is not this
    # version's even though τ and the router are the parent's
    parent, written = versions
    manifest = verify_bundle_dir(written["calibrators"])
    decision, own = shipped_decision(manifest), shipped_decision(verify_bundle_dir(parent))
    assert decision.tau == own.tau and own.held_out is not None and decision.held_out is None
    routing = manifest["recalibration"]["metrics"]["routing"]
    line = decision_line(decision)
    assert "measured on held-out feedback" in line and PARENT_ROW not in line
    assert f"retrieval rate {fmt(routing['retrieval_rate']['after'], 2)}" in line
    card = (written["calibrators"] / "README.md").read_text()
    assert line in card and "(1.0.0's decision, not this version's)" in card and "(this bundle)" not in card
    assert "measured 1.0.0's decision" in card


def test_the_listing_shows_each_versions_measured_figures_and_where(versions, monkeypatch, capsys):
    parent, written = versions
    listing = run_bundles(monkeypatch, capsys, parent.parent.parent)
    tau = shipped_decision(verify_bundle_dir(written["tau"]))
    routing = verify_bundle_dir(written["tau"])["recalibration"]["metrics"]["routing"]
    own = shipped_decision(verify_bundle_dir(parent)).held_out
    moved, kept, first = block(listing, "1.1.0"), block(listing, "1.2.0"), block(listing, "1.0.0")
    assert fmt(tau.tau.value) in moved and "recalibrate on feedback" in moved
    assert f"held-out feedback, {routing['rows']} rows (recalibrated from 1.0.0)" in moved
    assert fmt(routing["retrieval_rate"]["after"]) in moved and fmt(routing["quality"]["after"]) in moved
    assert fmt(own.contains) not in moved  # the parent's routed containment is not shown as 1.1.0's
    assert "held-out feedback" in kept and "recalibrated from 1.0.0" in kept and fmt(own.contains) not in kept
    assert "test of the run" in first and fmt(own.contains) in first
