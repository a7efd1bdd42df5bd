"""The lifecycle benchmark's parts (workbench/bench/lifecycle): its recalibration step on feedback that can be
recalibrated (the library's refit written as a new version under the stage's directory, the bundle's P(correct)
before / after with intervals, routed quality), the refusal passed on as the result, the drift stream's counts, and
the recipe section's load check. The whole stage on a tiny run: tests/integration/test_lifecycle.py."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from tests.unit.recalibration.feedback_data import TINY, shifted_rows, write_jsonl
from workbench.bench.lifecycle import drift
from workbench.bench.lifecycle.feedback import recalibrate_on
from workbench.bench.lifecycle.settings import LifecycleSection, check
from workbench.bundle.integrity import verify_bundle_dir
from workbench.core.errors import ConfigError
from workbench.monitoring.reference import build_reference
from workbench.monitoring.settings import DriftSettings


def _feedback(tmp_path, n: int):
    rows = shifted_rows(n)
    rng = np.random.default_rng(1)
    retrieved = [int(r["label"] or rng.random() < 0.5) for r in rows]
    for row, value in zip(rows, retrieved, strict=True):
        row["label_retrieved"] = value
    return write_jsonl(tmp_path / "feedback.jsonl", rows), retrieved


def test_recalibration_step_writes_a_version_under_the_stage_and_compares_p_correct(tmp_path):
    parent = shutil.copytree(TINY, tmp_path / "shipped" / "tiny" / "1.0.0")
    feedback, retrieved = _feedback(tmp_path, 200)
    out = tmp_path / "stage" / "bundles"
    result = recalibrate_on(
        parent, feedback, retrieved, out, holdout=0.3, seed=0, force=False, overrides={}, refit=(), n_resamples=50
    )
    assert result["version"] == "1.1.0" and result["better"] and result["refitted"] == ["calibrators"]
    assert verify_bundle_dir(out / "1.1.0")["recalibration"]["parent"] == "1.0.0"
    assert sorted(p.name for p in parent.parent.iterdir()) == ["1.0.0"]  # nothing written beside the shipped one
    held = result["holdout_rows"]
    assert held == len(result["reliability"]["labels"]) == len(result["reliability"]["p_correct"][1])
    for metric in ("auroc", "ece"):
        row = result["p_correct"][metric]
        for side in ("before", "after"):
            assert row[f"{side}_ci"]["low"] <= row[side] <= row[f"{side}_ci"]["high"]
    # the labels are correct half as often as the shipped calibrators say: the new version's P(correct) is lower
    before, after = (np.array(v) for v in result["reliability"]["p_correct"])
    assert after.mean() < before.mean()
    assert result["p_correct"]["ece"]["after"] < result["p_correct"]["ece"]["before"]
    routed = result["routed"]  # recalibrate's own routing figures, at the parent's τ (not refitted here)
    assert routed["metric"] == "routed_quality" and routed["tau"]["after"] == routed["tau"]["before"]
    rate, quality = routed["retrieval_rate"], routed["quality"]
    assert rate["after"] >= rate["before"]  # lower P(correct): more retrieval
    assert min(routed["closed_book"], routed["always_retrieve"]) <= quality["after"] <= routed["always_retrieve"]


def test_a_refusal_of_the_library_is_the_result_and_nothing_is_written(tmp_path):
    parent = shutil.copytree(TINY, tmp_path / "tiny" / "1.0.0")
    feedback, retrieved = _feedback(tmp_path, 40)  # ~6 correct held out: under the 10 of each label it needs
    out = tmp_path / "stage" / "bundles"
    result = recalibrate_on(parent, feedback, retrieved, out, holdout=0.3, seed=0, force=False, overrides={})
    assert "needs 10 of each label" in result["refused"] and "\n" not in result["refused"]
    assert result["refused"].startswith("feedback.jsonl: ")  # named by file, not by the stage's staging path
    assert result["rows"] == 40 and not out.exists()


def test_the_recalibration_step_refits_tau_with_the_bundles_rule_when_asked(tmp_path):
    parent = shutil.copytree(TINY, tmp_path / "shipped" / "tiny" / "1.0.0")
    feedback, retrieved = _feedback(tmp_path, 200)
    out = tmp_path / "stage" / "bundles"
    result = recalibrate_on(
        parent, feedback, retrieved, out, holdout=0.3, seed=0, force=True, overrides={}, refit=("tau",), n_resamples=50
    )
    tau = result["routed"]["tau"]
    assert result["refitted"] == ["calibrators", "tau"] and tau["after"] != tau["before"]
    assert verify_bundle_dir(out / "1.1.0")["decision"]["tau"] == pytest.approx(tau["after"])


def test_drift_stream_counts_false_alarms_and_requests_until_the_alarm():
    rng = np.random.default_rng(0)
    p = rng.uniform(size=400)
    reference = build_reference("calib", {"confidence": rng.normal(size=400)}, p, p < 0.3, None, DriftSettings())
    reference = drift.with_window(reference, 40, 20)
    assert (reference.settings.window, reference.settings.min_count) == (40, 20)

    def records(values):
        return drift.log_records(
            [{"p_correct": float(rng.uniform()), "features": {"confidence": float(v)}} for v in values],
            ["confidence"],
            0.3,
            [None] * len(values),
        )

    traffic = records(rng.normal(size=60))
    steps = drift.stream(reference, traffic)
    counts = drift.false_alarms(steps)
    assert counts["requests"] == 60 and counts["judged"] == 41  # from the 20th request on
    assert counts["alarms"] == 0 and counts["series"]["feature:confidence"]["alarms"] == 0
    shifted = drift.stream(reference, [*traffic, *records(rng.normal(loc=4.0, size=60))])
    delay = drift.requests_to_alarm(shifted, 60)
    assert delay["shifted"] == 60 and delay["alarming_before"] == []
    assert delay["series"]["feature:confidence"] is not None and delay["series"]["feature:confidence"] <= 20
    assert delay["any"] <= delay["series"]["feature:confidence"]
    trace = drift.alarm_ratio_trace(shifted)["feature:confidence"]
    assert trace[:19] == [None] * 19 and max(trace[19:60]) < 1.0 < trace[-1]  # a series alarms above 1


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"feedback_shift": "cloze", "shifts": ["ood"]}, "lifecycle.feedback_shift"),
        ({"shifts": ["ood", "poetry"]}, "lifecycle.shifts"),
        ({"holdout": 1.0}, "lifecycle.holdout"),
        ({"window": 20, "min_count": 30}, "lifecycle.min_count"),
        ({"shift_limit": 0}, "lifecycle.shift_limit"),
        ({"refit": ["tau", "calibrators"]}, "lifecycle.refit"),
        ({"tau_rule": "max_quality_under"}, "lifecycle.tau_rule"),
        ({"refit": [], "tau_rule": "target_rate"}, "lifecycle.tau_rule"),
    ],
)
def test_the_section_check_names_the_bad_key(change, key):
    from types import SimpleNamespace

    section = LifecycleSection(**change)
    with pytest.raises(ConfigError) as info:
        check(SimpleNamespace(lifecycle=section))
    assert info.value.where == key
