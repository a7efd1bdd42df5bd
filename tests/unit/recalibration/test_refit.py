"""Routed quality, ``--refit tau`` / ``--refit router``, the rebuilt monitoring reference and the archive of
``workbench recalibrate`` (workbench/recalibration/{decision,routed,reference,version}.py)."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest

from workbench.bundle.integrity import verify_bundle_dir
from workbench.bundle.shipped import shipped_decision
from workbench.calibration.ood import OODProfile
from workbench.classify.logistic import fit_logistic
from workbench.core.errors import ConfigError, DataError
from workbench.data.article_splits import ids_sha256
from workbench.methods.learned import save_learned
from workbench.monitoring.reference import REFERENCE_FILE, reference_from_dict
from workbench.recalibration import version as version_module
from workbench.recalibration.compare import holdout_split, recalibrate
from workbench.recalibration.feedback import read_feedback
from workbench.recalibration.version import bundle_decision, write_version
from workbench.runtime import load_bundle

from .feedback_data import TINY, shifted_rows, write_jsonl


def with_retrieval(rows: list[dict], p_correct: float, seed: int = 0) -> list[dict]:
    """``rows`` each given ``label_retrieved``: 1 with probability ``p_correct``."""
    rng = np.random.default_rng(seed)
    return [{**r, "label_retrieved": int(rng.random() < p_correct)} for r in rows]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny bundle copied as ``tiny/1.0.0``, its parts, and 200 rows of shifted feedback with label_retrieved."""
    root = tmp_path_factory.mktemp("refit")
    parent = shutil.copytree(TINY, root / "tiny" / "1.0.0")
    _manifest, calibrators, decision = bundle_decision(parent)
    path = write_jsonl(root / "feedback.jsonl", with_retrieval(shifted_rows(200), 0.8))
    return parent, calibrators, decision, path


def held_routes(decision, calibrators, rows, classifier=None, tau=None, seed=0, holdout=0.3):
    """The held-out rows' labels, label_retrieved and the routes of ``decision`` with these parts."""
    labels = np.array([r.label for r in rows])
    held = holdout_split(labels, holdout, seed)
    raw = np.array([r.features for r in rows])[held]
    policy = decision.policy(calibrators, classifier, tau)
    return labels[held], np.array([r.label_retrieved for r in rows])[held], policy.p_correct(raw) < policy.tau


def test_routed_quality_with_label_retrieved_is_the_mean_routed_label(tiny):
    _parent, calibrators, decision, path = tiny
    rows = read_feedback(path, calibrators.features)
    result = recalibrate(calibrators, rows, decision=decision, n_resamples=50)
    routing = result.metrics["routing"]
    assert routing["metric"] == "routed_quality" and routing["rows"] == result.holdout_rows
    labels, retrieved, before = held_routes(decision, calibrators, rows)
    _, _, after = held_routes(decision, result.calibrators, rows)
    assert before.any() and not before.all()
    assert routing["quality"]["before"] == pytest.approx(np.where(before, retrieved, labels).mean(), abs=1e-6)
    assert routing["quality"]["after"] == pytest.approx(np.where(after, retrieved, labels).mean(), abs=1e-6)
    assert routing["retrieval_rate"]["after"] == pytest.approx(after.mean(), abs=1e-6)
    for figure in ("retrieval_rate", "quality"):
        row = routing[figure]
        assert row["before_ci"]["low"] <= row["before"] <= row["before_ci"]["high"]
        assert row["change"] == pytest.approx(row["after"] - row["before"], abs=1e-5)
    assert routing["tau"] == {"before": decision.tau, "after": decision.tau, "rule": "target_rate"}


def test_without_label_retrieved_it_is_the_selective_accuracy(tiny, tmp_path):
    _, calibrators, decision, _ = tiny
    rows = read_feedback(write_jsonl(tmp_path / "f.jsonl", shifted_rows(200)), calibrators.features)
    routing = recalibrate(calibrators, rows, decision=decision, n_resamples=50).metrics["routing"]
    assert routing["metric"] == "selective_accuracy" and "closed-book" in routing["definition"]
    labels, _, before = held_routes(decision, calibrators, [dataclasses.replace(r, label_retrieved=0) for r in rows])
    assert routing["quality"]["before"] == pytest.approx(labels[~before].mean(), abs=1e-6)


@pytest.mark.parametrize(
    ("value", "message"),
    [(2, "must be 0 or 1"), ("1", "must be 0 or 1"), (True, "must be 0 or 1")],
)
def test_bad_label_retrieved_is_one_line_naming_file_row_and_field(tmp_path, value, message):
    rows = shifted_rows(5)
    rows[3]["label_retrieved"] = value
    path = write_jsonl(tmp_path / "f.jsonl", rows)
    with pytest.raises(DataError, match=rf"{path}: row 4: field 'label_retrieved' {message}") as info:
        read_feedback(path, list(rows[0]["features"]))
    assert "\n" not in str(info.value)


def test_max_routed_score_without_label_retrieved_is_refused_naming_field_and_rule(tiny, tmp_path):
    _, calibrators, decision, _ = tiny
    rows = read_feedback(write_jsonl(tmp_path / "f.jsonl", shifted_rows(200)), calibrators.features)
    with pytest.raises(DataError, match=r"'label_retrieved'.*max_routed_score.*--tau-rule target_rate") as info:
        recalibrate(calibrators, rows, decision=decision, refit=["tau"], tau_rule="max_routed_score")
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=r"--tau-rule re-chooses tau: add --refit tau"):
        recalibrate(calibrators, rows, decision=decision, tau_rule="max_f1")
    with pytest.raises(ConfigError, match=r"--refit takes calibrators, tau, router"):
        recalibrate(calibrators, rows, decision=decision, refit=["everything"])
    study = dataclasses.replace(decision, rule="study")
    with pytest.raises(ConfigError, match=r"set by 'study', not a threshold rule: name one with --tau-rule"):
        recalibrate(calibrators, rows, decision=study, refit=["tau"])


@pytest.fixture(scope="module")
def tau_version(tiny):
    """A version whose τ was re-chosen (the bundle's rule, target_rate 0.5) on the feedback."""
    parent, calibrators, decision, path = tiny
    rows = read_feedback(path, calibrators.features)
    result = recalibrate(calibrators, rows, decision=decision, refit=["tau"], n_resamples=50)
    out = parent.parent.parent / "tau"
    return write_version(parent, result, path, holdout=0.3, seed=0, forced=False, out=out), result


def test_tau_refit_moves_tau_and_the_runtime_decides_by_it(tiny, tau_version):
    _, calibrators, decision, _ = tiny
    written, result = tau_version
    assert result.refitted == ("calibrators", "tau") and result.rule == "target_rate"
    assert abs(result.tau - decision.tau) > 0.02
    manifest = verify_bundle_dir(written)
    assert manifest["decision"]["tau"] == result.tau and manifest["recalibration"]["refitted"] == ["calibrators", "tau"]
    assert manifest["recalibration"]["metrics"]["routing"]["tau"]["after"] == result.tau
    assert "calibrators, tau and the decision graph are refitted" in manifest["notes"][-1]
    fitted = manifest["provenance"]["fitted"]
    assert fitted["decision.tau"] == {
        "set_by": "recalibrate",
        "split": "feedback",
        "questions": result.fit_rows,
        "ids_sha256": ids_sha256(result.fit_ids),
        "out_of_fold": True,
    }
    assert fitted["decision.calibrators"]["set_by"] == "recalibrate" and "decision.classifier" not in fitted
    assert shipped_decision(manifest).tau.origin() == f"recalibrate on `feedback`, {result.fit_rows} questions"
    assert "the classifier (router) and the held-out metrics are 1.0.0's" in manifest["notes"][-1]
    runtime, onnx = load_bundle(written), load_bundle(written, {"classifier": "onnx"})
    rng = np.random.default_rng(5)
    low, high = sorted((decision.tau, result.tau))
    between = 0
    for _ in range(300):
        probe = {f: float(rng.uniform(*result.calibrators.ranges[f])) for f in calibrators.features}
        decided = runtime.decide(probe)
        assert decided.retrieve == (decided.p_correct < result.tau)
        assert onnx.decide(probe).retrieve == decided.retrieve or abs(decided.p_correct - result.tau) < 1e-5
        between += low <= decided.p_correct < high  # where the parent's τ would decide the other way
    assert between > 0


def test_router_refit_loads_and_decides(tiny, tmp_path):
    parent, calibrators, decision, path = tiny
    rows = read_feedback(path, calibrators.features)
    result = recalibrate(calibrators, rows, decision=decision, refit=["router"], n_resamples=20, force=True)
    assert result.refitted == ("calibrators", "router") and result.tau is None
    assert result.classifier.kind == "mlp" and result.classifier.config == decision.classifier.config
    written = write_version(parent, result, path, holdout=0.3, seed=0, forced=not result.better, out=tmp_path / "t")
    shipped = json.loads((written / "learned" / "classifier.json").read_text())
    assert shipped != json.loads((parent / "learned" / "classifier.json").read_text())
    runtime = load_bundle(written)  # numpy / ONNX agreement of the rebuilt graph is checked on load
    probe = {f: float(np.mean(result.calibrators.ranges[f])) for f in calibrators.features}
    u = result.calibrators.transform([result.calibrators.clean(probe)[0]])
    p = float(result.classifier.predict_proba(u)[0])
    decided = runtime.decide(probe)
    assert decided.p_correct == pytest.approx(p, abs=1e-6) and decided.retrieve == (p < decision.tau)
    manifest = verify_bundle_dir(written)
    assert manifest["recalibration"]["refitted"] == ["calibrators", "router"] and manifest["decision"]["tau"] == (
        decision.tau
    )
    assert "tau and the held-out metrics are 1.0.0's" in manifest["notes"][-1]


def test_router_and_tau_refit_of_a_logistic_decision(tiny):
    _, calibrators, decision, path = tiny
    rng = np.random.default_rng(0)
    inputs = rng.uniform(size=(60, len(calibrators.features)))
    labels = (inputs[:, 0] + 0.3 * rng.normal(size=60) > 0.5).astype(float)
    logistic = fit_logistic(inputs, labels, feature_names=calibrators.features)
    parent = dataclasses.replace(decision, classifier=logistic)
    rows = read_feedback(path, calibrators.features)
    result = recalibrate(calibrators, rows, decision=parent, refit=["router,tau"], n_resamples=20, force=True)
    assert result.refitted == ("calibrators", "tau", "router") and result.classifier.kind == "logistic"
    assert not np.allclose(result.classifier.coef, logistic.coef) and 0.0 < result.tau < 1.0
    assert result.metrics["routing"]["tau"] == {"before": decision.tau, "after": result.tau, "rule": "target_rate"}


def test_a_moved_decision_that_loses_routed_quality_is_refused(tiny, tmp_path):
    _, calibrators, decision, _ = tiny
    # retrieval never helps, and τ re-chosen to retrieve for every question: routed quality collapses
    rows = read_feedback(
        write_jsonl(tmp_path / "f.jsonl", with_retrieval(shifted_rows(200), 0.0)), calibrators.features
    )
    always = dataclasses.replace(decision, target_rate=1.0)
    with pytest.raises(DataError, match=r"not better on the held-out part: its routed_quality changes by -"):
        recalibrate(calibrators, rows, decision=always, refit=["tau"], n_resamples=50)
    forced = recalibrate(calibrators, rows, decision=always, refit=["tau"], n_resamples=50, force=True)
    assert not forced.better and forced.metrics["mean_ece"]["after"] < forced.metrics["mean_ece"]["before"]


def test_the_monitoring_reference_is_rebuilt_from_the_feedback(tiny, tmp_path):
    from tests.unit.monitoring.bundles import bundle_with_reference

    _, calibrators, decision, path = tiny
    parent = bundle_with_reference(tmp_path / "tiny" / "1.0.0", tuple(calibrators.features))
    rows = read_feedback(path, calibrators.features)
    result = recalibrate(calibrators, rows, decision=decision, n_resamples=20)
    written = write_version(parent, result, path, holdout=0.3, seed=0, forced=False)
    manifest = load_bundle(written).manifest
    assert manifest["monitoring"] == {"file": REFERENCE_FILE, "split": "feedback", "rows": result.fit_rows}
    old = json.loads((parent / REFERENCE_FILE).read_text())
    new = json.loads((written / REFERENCE_FILE).read_text())
    assert new["settings"] == old["settings"] and new["rows"] == result.fit_rows
    assert reference_from_dict(new, "reference").split == "feedback"  # what serve and monitor parse, strictly
    for j, name in enumerate(calibrators.features):
        assert new["series"][f"feature:{name}"]["sample"] == sorted(result.fit_features[:, j].tolist())
        assert new["series"][f"feature:{name}"] != old["series"][f"feature:{name}"]
    p = decision.policy(result.calibrators).p_correct(result.fit_features)
    assert new["series"]["p_correct"]["sample"] == pytest.approx(sorted(p.tolist()))
    assert new["series"]["retrieval"]["proportions"][1] == pytest.approx(float((p < decision.tau).mean()))
    assert "ood" not in new["series"]  # the tiny bundle has no OOD profile
    assert "monitoring reference is rebuilt from the feedback's fit part" in manifest["notes"][-1]


def test_the_archive_is_written_loads_and_goes_with_a_failed_write(tiny, tau_version, monkeypatch):
    written, _ = tau_version
    archive = written.parent / "tiny-1.1.0.tar.gz"
    loaded = load_bundle(archive, {"extract_dir": str(written.parent.parent / "cache")})
    assert loaded.version == "1.1.0" and loaded.manifest["decision"] == verify_bundle_dir(written)["decision"]
    parent, calibrators, _decision, path = tiny
    result = recalibrate(calibrators, read_feedback(path, calibrators.features), n_resamples=20)

    def refused(src, dst):
        raise OSError("the rename failed")

    monkeypatch.setattr(version_module.os, "rename", refused)
    with pytest.raises(OSError, match="the rename failed"):
        write_version(parent, result, path, holdout=0.3, seed=0, forced=False, out=written.parent)
    assert sorted(p.name for p in written.parent.iterdir()) == ["1.1.0", "tiny-1.1.0.tar.gz"]


def test_cli_refits_tau_prints_routed_quality_and_refuses_in_one_line(tmp_path, monkeypatch, capsys):
    from .test_version import run_cli

    parent = shutil.copytree(TINY, tmp_path / "tiny" / "1.0.0")
    plain = write_jsonl(tmp_path / "plain.jsonl", shifted_rows(200))
    args = ["--bundle", str(parent), "--refit", "tau", "--tau-rule", "max_routed_score", "--feedback"]
    code, _, err = run_cli(monkeypatch, capsys, *args, str(plain))
    assert code == 2 and "field 'label_retrieved' is needed" in err and err.count("\n") == 1
    rows = write_jsonl(tmp_path / "rows.jsonl", with_retrieval(shifted_rows(200), 0.8))
    code, out, err = run_cli(monkeypatch, capsys, *args, str(rows), "--no-archive")
    assert code == 0, err
    assert "calibrators, tau refitted" in out and "routed quality" in out and "retrieval rate" in out
    tau = verify_bundle_dir(parent.parent / "1.1.0")["decision"]
    assert tau["rule"] == "max_routed_score" and f"→ {tau['tau']:.4f} (rule max_routed_score)" in out
    assert sorted(p.name for p in parent.parent.iterdir()) == ["1.0.0", "1.1.0"]


def test_the_reference_flags_the_feedback_questions_with_the_bundles_ood_profile(tiny, tmp_path):
    from tests.unit.runtime.test_ood_runtime import EITHER_OR, FIT, OPEN, _bundle

    _, calibrators, decision, _ = tiny
    parent = _bundle(tmp_path)
    rows = shifted_rows(200)
    for i, row in enumerate(rows):  # a third open questions (their form fails the profile's), the rest like its fit
        row["question"] = OPEN if i % 3 == 0 else EITHER_OR
    path = write_jsonl(tmp_path / "f.jsonl", rows)
    feedback = read_feedback(path, calibrators.features)
    result = recalibrate(calibrators, feedback, decision=decision, n_resamples=20)
    written = write_version(parent, result, path, holdout=0.3, seed=0, forced=False, archive=False)
    series = json.loads((written / REFERENCE_FILE).read_text())["series"]["ood"]
    flagged = sum(q == OPEN for q in result.fit_questions) / len(result.fit_questions)
    assert 0.2 < flagged < 0.5 and series["proportions"] == pytest.approx([1 - flagged, flagged])

    embedded = OODProfile.fit(FIT, np.random.default_rng(0).normal(size=(len(FIT), 4)), embedder="fp")
    embedded.embedding.threshold = 0.5  # about the median novelty of the embed below: some fire, some do not
    with_embedding = _bundle(tmp_path / "embedding", profile=embedded)
    written = write_version(with_embedding, result, path, holdout=0.3, seed=0, forced=False, archive=False)
    assert "ood" not in json.loads((written / REFERENCE_FILE).read_text())["series"]  # no embedder, no parent series

    def embed(questions):  # vectors unlike the fit questions'
        return np.random.default_rng(1).normal(size=(len(questions), 4)) + np.array([4.0, 0.0, 0.0, 0.0])

    far = write_version(with_embedding, result, path, holdout=0.3, seed=0, forced=False, archive=False, embed=embed)
    checked = embedded.check_questions(list(result.fit_questions), embed)
    assert any("question_embedding" in c.checks for c in checked)
    share = sum(c.ood for c in checked) / len(checked)
    assert share > flagged
    assert json.loads((far / REFERENCE_FILE).read_text())["series"]["ood"]["proportions"] == pytest.approx(
        [1 - share, share]
    )


def test_without_the_embedder_the_parents_ood_series_is_kept_and_said(tiny, tmp_path):
    from tests.unit.bundle.test_bundle_attacks import _reseal
    from tests.unit.monitoring.bundles import bundle_with_reference
    from tests.unit.runtime.test_ood_runtime import FIT

    _, calibrators, decision, path = tiny
    parent = bundle_with_reference(tmp_path / "tiny" / "1.0.0", tuple(calibrators.features))
    profile = OODProfile.fit(FIT, np.random.default_rng(0).normal(size=(len(FIT), 4)), embedder="fp")
    manifest = json.loads((parent / "manifest.json").read_text())
    for file in save_learned(profile, parent / "learned" / "ood.json"):
        manifest["files"][f"learned/{file.name}"] = {}
    manifest["decision"]["files"]["ood"] = "learned/ood.json"
    _reseal(parent, manifest)
    result = recalibrate(calibrators, read_feedback(path, calibrators.features), decision=decision, n_resamples=20)
    written = write_version(parent, result, path, holdout=0.3, seed=0, forced=False, archive=False)
    old = json.loads((parent / REFERENCE_FILE).read_text())["series"]
    new = json.loads((written / REFERENCE_FILE).read_text())["series"]
    assert new["ood"] == old["ood"] and new["p_correct"] != old["p_correct"]
    assert "ood series is 1.0.0's" in verify_bundle_dir(written)["notes"][-1]
