"""docs/adding-a-feature.md, proven: a feature from a package outside ``workbench/`` (tests/fixtures/plugins/
toy_feature, found through its ``workbench.features`` entry point, no pip install) is collected by the real collect
stage, calibrated, used by the router classify ships, exported in a bundle that records its package, and computed by
the runtime that loads the bundle — no file of the workbench names it. Without the package the bundle is refused in
one line naming the feature and the package."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.bundle_run import run_overrides, run_with_synthetic_collect
from tests.feature_plugins import TOY_FEATURE, TOY_NAME, installed

pytestmark = pytest.mark.integration

RECIPE_KEYS = [
    f"collect.features=[confidence,{TOY_NAME}]",
    "classify.router_search=none",  # the classifier over every collected feature: the toy one included
    "evaluate.methods=[no_rag,d2rag]",
]


def toy_collect(ctx):
    """:func:`tests.bundle_run.synthetic_collect`'s rows (labels that a feature can predict) with the toy feature
    computed by the plugin through the stats graph's own derived-stat step, from greedy log-probs that follow the
    label: a random tiny model never answers correctly, so a real collection would hold one class."""
    from unittest import mock

    from tests.bundle_run import synthetic_collect
    from workbench.stages.collect import run as collect
    from workbench.uncertainty.features import compute_features
    from workbench.uncertainty.stats import DERIVED_STATS

    write = collect._write_outputs
    rng = np.random.default_rng(0)

    def with_toy(out_dir, by_split, features, meta):
        for records in by_split.values():
            for record in records:
                spread = 0.5 if record["correct_contains"] else 3.0  # a doubtful token when the answer is wrong
                record["greedy_logprobs"] = [float(-rng.uniform(0.0, spread)) for _ in range(3)]
                stats = {"greedy_logprobs": record["greedy_logprobs"], "greedy_eos": False}
                stats["toy_min_logprob"] = DERIVED_STATS["toy_min_logprob"].compute(record["question"], stats)
                record[TOY_NAME] = compute_features(stats, [TOY_NAME])[TOY_NAME]
        write(out_dir, by_split, features, meta)

    with mock.patch.object(collect, "_write_outputs", with_toy):
        return synthetic_collect(ctx)


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory, tiny_lm_long_dir, tiny_encoder_dir):
    """The tiny pipeline with the toy feature collected beside ``confidence``; the bundle it exports."""
    tmp = tmp_path_factory.mktemp("toy-feature-run")
    with installed(TOY_FEATURE):
        overrides = run_overrides(tmp, tiny_lm_long_dir, tiny_encoder_dir, *RECIPE_KEYS)
        run_with_synthetic_collect("quickstart", overrides, entry=f"{__name__}:toy_collect")
    return tmp


def test_the_real_collect_stage_computes_the_plugin_feature(toy_run, tmp_path, tiny_lm_long_dir, tiny_encoder_dir):
    import shutil

    from workbench.recipe import load_recipe
    from workbench.stages.runner import run_recipe

    # the toy run's data settings (its corpus file included), so its build_data output (copied with the run marker
    # that makes the copy a run directory) is this run's, cached
    run = tmp_path / "run"
    shutil.copytree(toy_run / "run" / "stages" / "build_data", run / "stages" / "build_data")
    shutil.copy2(toy_run / "run" / ".workbench-run", run)
    with installed(TOY_FEATURE):
        overrides = run_overrides(toy_run, tiny_lm_long_dir, tiny_encoder_dir, *RECIPE_KEYS)
        overrides += [f"run_dir={run}", f"report.dir={tmp_path}/report", f"export.dir={tmp_path}/bundles"]
        overrides += ["stages=[build_data,collect]", "collect.limit=3", "collect.splits=[calib]"]
        result = run_recipe(load_recipe("quickstart", overrides))
    assert result.stage("build_data").cached and not result.stage("collect").cached
    out = run / "stages" / "collect"
    described = {f["name"]: f for f in json.loads((out / "features.json").read_text())}
    assert described[TOY_NAME]["package"] == {"name": "toy-feature", "version": "0.1"}
    assert "package" not in described["confidence"]
    from datasets import load_from_disk

    rows = load_from_disk(str(next(out.glob("*calib*"))))
    values = np.asarray(rows[TOY_NAME], dtype=float)
    assert len(values) == 3 and np.all(np.isfinite(values)) and np.all(values <= 0.0)  # −NLL of the worst token


def test_the_bundle_records_the_plugin_feature_and_its_package(toy_run):
    manifest = json.loads((toy_run / "bundles" / "tiny" / "1.0.0" / "manifest.json").read_text())
    assert manifest["decision"]["features"] == ["confidence", TOY_NAME]
    record = next(f for f in manifest["features"] if f["name"] == TOY_NAME)
    assert record["version"] == "1" and record["package"] == {"name": "toy-feature", "version": "0.1"}
    calibrated = json.loads((toy_run / "run" / "stages" / "calibrate" / "summary.json").read_text())
    assert TOY_NAME in json.dumps(calibrated)


def test_the_runtime_computes_the_plugin_feature_from_the_installed_package(toy_run, tiny_lm_long_dir):
    from workbench.runtime import load_bundle

    with installed(TOY_FEATURE):
        runtime = load_bundle(toy_run / "bundles" / "tiny" / "1.0.0")
        answer = runtime.answer("Who wrote Hamlet?", "d2rag")
    assert set(answer.features) == {"confidence", TOY_NAME}
    assert answer.features[TOY_NAME] is not None and answer.features[TOY_NAME] <= 0.0
    assert answer.p_correct is not None and 0.0 <= answer.p_correct <= 1.0


def test_workbench_infer_answers_with_the_plugin_feature_and_refuses_without_it(toy_run, tmp_path, monkeypatch, capsys):
    import sys

    from typer.testing import CliRunner

    from workbench import cli
    from workbench.cli import app

    questions, output = tmp_path / "q.jsonl", tmp_path / "a.jsonl"
    questions.write_text(json.dumps({"id": "a", "question": "Who wrote Hamlet?"}) + "\n")
    args = ["infer", "--bundle", str(toy_run / "bundles" / "tiny" / "1.0.0"), "--method", "d2rag"]
    with installed(TOY_FEATURE):
        result = CliRunner().invoke(app, [*args, "--input", str(questions), "--output", str(output)])
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in output.read_text().splitlines()]
    assert set(row["features"]) == {"confidence", TOY_NAME}
    monkeypatch.setattr(sys, "argv", ["workbench", *args, "Who wrote Hamlet?"])  # uninstalled again
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and f"'{TOY_NAME}' comes from the package toy-feature 0.1, which is not" in line


def test_a_bundle_whose_feature_package_is_missing_is_refused_in_one_line(toy_run):
    from workbench.core.errors import DataError
    from workbench.runtime import load_bundle

    with pytest.raises(DataError) as caught:
        load_bundle(toy_run / "bundles" / "tiny" / "1.0.0")
    message = str(caught.value)
    assert "\n" not in message and TOY_NAME in message and "toy-feature 0.1" in message
    assert "not installed" in message
