"""Config errors through the real CLI: whatever raises them (the recipe checks, torch, transformers, safetensors), the
user sees one line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def wb(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m workbench ARGS`` in a subprocess (stdout and stderr captured)."""
    command = [sys.executable, "-m", "workbench", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=300)


def assert_one_line_error(out: subprocess.CompletedProcess, expected: str) -> None:
    """Exit status 2 and a stderr of exactly one line that contains ``expected``."""
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, out.stderr
    assert len(lines) == 1 and expected in lines[0], out.stderr
    assert "Traceback" not in out.stderr + out.stdout


@pytest.fixture
def recipe(tmp_path, tiny_lm_dir) -> Path:
    """A two-stage recipe (build_data → answer) on a test-only local file, a local corpus and the tiny model."""
    rows = [{"id": "q0", "question": "Who wrote Hamlet?", "answers": ["Shakespeare"]}]
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    doc = {"doc_id": "hamlet", "title": "Hamlet", "text": "Hamlet is a tragedy by William Shakespeare."}
    (tmp_path / "corpus.jsonl").write_text(json.dumps(doc) + "\n")
    path = tmp_path / "tiny.yaml"
    path.write_text(
        "name: tiny\n"
        "stages: [build_data, answer]\n"
        f"run_dir: {tmp_path}/run\n"
        "tracker: none\n"
        f"generator: {{model: {tiny_lm_dir}, cache: false}}\n"
        f"data: {{dataset: {tmp_path}/qa.jsonl, corpus: {tmp_path}/corpus.jsonl, fractions: [0, 0, 0, 1]}}\n"
        "answer: {limit: 1, max_new_tokens: 2}\n"
    )
    return path


def test_a_negative_limit_is_one_line_at_validate():
    out = wb("validate", "quickstart", "answer.limit=-1")
    assert_one_line_error(out, "error: command line: answer.limit: must be >= 1, got -1")


def test_the_traceback_behind_the_line_on_request(monkeypatch):
    monkeypatch.setenv("WORKBENCH_TRACEBACK", "1")
    out = wb("validate", "quickstart", "answer.limit=-1")
    assert out.returncode == 2 and "Traceback" in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("error: command line: answer.limit")


def test_an_unknown_device_stops_the_run_before_any_stage(recipe, tmp_path):
    out = wb("-q", "run", str(recipe), "generator.device=tpu")
    assert_one_line_error(out, "command line: generator.device: unknown device 'tpu'")
    assert not (tmp_path / "run").exists()


def test_a_missing_gpu_is_one_line_when_the_model_loads(recipe):
    out = wb("-q", "run", str(recipe), "generator.device=cuda:99")
    assert_one_line_error(out, "error: generator.device: 'cuda:99' but torch sees")


def test_a_corrupt_checkpoint_is_one_line(recipe, tmp_path, tiny_lm_dir):
    broken = shutil.copytree(tiny_lm_dir, tmp_path / "broken")
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    out = wb("-q", "run", str(recipe), f"generator.model={broken}")
    assert_one_line_error(out, f"error: {broken}: cannot build the generator on cpu (float32): SafetensorError")
