"""The `custom` recipe end to end on a user's own files: a made-up help-desk dataset and corpus with foreign column
names, extra columns and a split column (tests/helpdesk_data.py), read through data.fields / data.corpus_fields /
data.split_column, built into splits, answered, collected, calibrated and routed by the real SmolLM2, exported as a
bundle, and the bundle answering through `workbench infer`.

Sizes are cut to a minute or two on 2 cores: 12 questions (8 calib, 4 test), 2 samples, three features, and the OOD
flag's and τ's settings that such a small calib split allows.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.helpdesk_data import helpdesk_overrides, write_helpdesk
from workbench.cli import app
from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration


def test_the_custom_recipe_takes_a_users_files_from_build_to_bundle_to_infer(tmp_path, smollm2_dir):
    questions, corpus = write_helpdesk(tmp_path, per_kind=6)
    overrides = [
        *helpdesk_overrides(questions, corpus),
        f"run_dir={tmp_path}/run",
        f"report.dir={tmp_path}/report",
        f"export.dir={tmp_path}/bundles",
        "threads=0",
        "collect.samples=2",
        "collect.features=[confidence,entropy,dtr_nll]",
        "calibrate.ood_fpr=0.25",  # 8 calib questions set the OOD threshold (5 % needs 19)
        "calibrate.ood_neighbours=3",
        "classify.tau_folds=2",  # τ's out-of-fold choice needs tau_folds questions of each class
        "classify.router_bootstrap=200",
    ]
    result = run_recipe(load_recipe("custom", overrides))
    assert [s.name for s in result.stages] == [
        "build_data",
        "answer",
        "collect",
        "calibrate",
        "classify",
        "export",
        "report",
    ]
    # the split column decided the splits (dev → calib, holdout → test): nothing went to a split no stage reads
    built = result.stage("build_data").summary
    assert (built["n_train"], built["n_calib"], built["n_val"], built["n_test"], built["n_passages"]) == (
        0,
        8,
        0,
        4,
        12,
    )
    log = (tmp_path / "run" / "logs" / "run.log").read_text()
    assert "column(s) priority are no QA field: kept in each question's metadata" in log
    assert "column(s) updated are no passage field (doc_id, title, text, topic): dropped" in log
    # the answers were scored against the mapped resolution column, the gold passage found by its corpus id, and the
    # kind column became the template the report groups by
    answer = json.loads((tmp_path / "run" / "stages" / "answer" / "summary.json").read_text())
    assert answer["n_questions"] == 4 and answer["modes"]["rag"]["recall_at_k"] == 1.0
    assert {kind: stats["n"] for kind, stats in answer["by_template"]["rag"].items()} == {"company": 2, "general": 2}
    report = (tmp_path / "report" / "report.md").read_text()
    assert "| company | 2 |" in report and "| general | 2 |" in report
    # closed-book correctness holds both classes on calib (capitals known, door codes not), so the calibrators and
    # the router were fitted on a real signal
    collected = result.stage("collect").summary
    assert collected["calib_rows"] == 8 and 0.0 < collected["calib_accuracy"] < 1.0
    assert result.stage("calibrate").summary["features"] == 3 and result.stage("classify").summary["router"]

    bundle = tmp_path / "bundles" / "custom" / "1.0.0"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["corpus"]["fields"] == {"doc_id": "id", "title": "name", "text": "body", "topic": "category"}
    assert manifest["corpus"]["passages"] == 12 and set(manifest["methods"]) == {"no_rag", "standard_rag", "d2rag"}

    # the bundle reads the user's corpus file through its mapping and answers
    out = CliRunner().invoke(
        app, ["infer", "--bundle", str(bundle), "--method", "standard_rag", "What is the door code of the Oslo office?"]
    )
    assert out.exit_code == 0, out.output
    assert "Q: What is the door code of the Oslo office?" in out.output
    assert "retrieved: yes (Oslo office access" in out.output  # the title from the corpus's 'name' column
