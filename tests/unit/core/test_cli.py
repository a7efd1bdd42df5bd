"""The CLI as a user sees it: one-line errors with exit status 2, ls / cp / validate / config / stages."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def wb(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_help_lists_the_verbs():
    out = wb("--help")
    assert out.returncode == 0
    for verb in ("ls", "cp", "validate", "run", "doctor"):
        assert verb in out.stdout


def test_help_does_not_import_heavy_libraries():
    code = (
        "import sys; from typer.testing import CliRunner; from workbench.cli import app;"
        "CliRunner().invoke(app, ['--help']);"
        "print(sorted(m for m in ('torch', 'transformers', 'lightning', 'optuna', 'datasets') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_ls_shows_quickstart():
    out = wb("ls")
    assert out.returncode == 0 and "quickstart" in out.stdout


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: x\nstages: [build_data]\nanswer:\n  limt: 3\n", "bad.yaml:4: unknown key 'answer.limt'"),
        ("name: x\nstages: [build_data\n", "malformed YAML"),
        ("name: x\nstages: [build_data]\nseed: abc\n", "bad.yaml:3: 'seed' expects int"),
        ("name: x\n", "missing required key 'stages'"),
    ],
)
def test_validate_errors_are_one_line_exit_2(tmp_path, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    out = wb("validate", str(path))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], out.stderr


def test_validate_ok_and_unknown_recipe():
    assert wb("validate", "quickstart").returncode == 0
    out = wb("run", "no-such-recipe")
    assert out.returncode == 2 and "unknown recipe 'no-such-recipe'" in out.stderr


def test_cp_copies_and_refuses_to_overwrite(tmp_path):
    out = wb("cp", "quickstart", str(tmp_path))
    assert out.returncode == 0 and (tmp_path / "quickstart.yaml").is_file()
    again = wb("cp", "quickstart", str(tmp_path / "quickstart.yaml"))
    assert again.returncode == 2 and "file exists" in again.stderr
    assert wb("validate", str(tmp_path / "quickstart.yaml")).returncode == 0


def test_bad_override_on_run_is_rejected_before_any_work(tmp_path):
    out = wb("run", "quickstart", "retrieval.k=many", f"run_dir={tmp_path}/run")
    assert out.returncode == 2 and "command line: 'retrieval.k' expects int" in out.stderr
    assert not (tmp_path / "run").exists()


def test_config_and_stages_print():
    assert "retrieval:" in wb("config").stdout
    assert "build_data" in wb("stages").stdout


def test_bad_dataset_fails_in_one_line_and_leaves_no_stage_output(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "question": "q?", "answers": ["a"]}\n{"id": "2", "question": 5}\n')
    out = wb("run", "quickstart", f"data.dataset={bad}", f"run_dir={tmp_path}/run", "tracker=none")
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert "bad.jsonl" in lines[-1] and "row 2" in lines[-1]
    assert not (tmp_path / "run" / "stages" / "build_data").exists()


def test_doctor_reports_assets_and_threads():
    out = wb("doctor")
    assert out.returncode == 0, out.stdout + out.stderr
    for needle in ("smollm2", "minilm", "torch threads", "transformers", "everything required is installed"):
        assert needle in out.stdout


def test_run_ends_with_the_per_stage_times(tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(f'{{"id": "{i}", "question": "q{i}?", "answers": ["a"]}}\n' for i in range(4)))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"name: t\nstages: [build_data]\ntracker: none\nrun_dir: {tmp_path}/run\ndata:\n  dataset: {data}\n"
    )
    first = wb("run", str(recipe))
    assert first.returncode == 0, first.stderr
    assert "peak RSS (MB)" in first.stdout
    rows = {line.split()[0]: line.split()[1:] for line in first.stdout.splitlines() if line.startswith("build_data")}
    assert float(rows["build_data"][0]) >= 0.0
    assert float(rows["build_data"][1]) > 10  # a Python process with the data libraries holds more than 10 MB
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["stages"]["build_data"]["summary"]["peak_rss_mb"] == pytest.approx(
        float(rows["build_data"][1]), abs=0.6
    )
    assert manifest["peak_rss_mb"] >= manifest["stages"]["build_data"]["summary"]["peak_rss_mb"]
    again = wb("run", str(recipe))
    assert any(line.split() == ["build_data", "cached", "-"] for line in again.stdout.splitlines()), again.stdout
