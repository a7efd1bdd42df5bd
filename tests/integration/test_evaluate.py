"""The evaluate stage end to end on the tiny model: baselines over a few questions, traces saved, report written."""

from __future__ import annotations

import json

import pytest

from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration


def _overrides(tmp_path, model, *extra):
    return [
        f"generator.model={model}",
        f"run_dir={tmp_path}/run",
        f"report.dir={tmp_path}/report",
        "tracker=none",
        "threads=0",
        "data.max_per_template=20",
        "stages=[build_data,evaluate,report]",
        "evaluate.limit=3",
        "evaluate.max_new_tokens=4",
        "evaluate.methods=[no_rag,standard_rag,oracle]",
        "retrieval.k=2",
        *extra,
    ]


def test_evaluate_runs_methods_saves_traces_and_reports(tmp_path, tiny_lm_long_dir, monkeypatch):
    import datasets

    run_recipe(load_recipe("evaluate", _overrides(tmp_path, tiny_lm_long_dir)))
    stage = tmp_path / "run" / "stages" / "evaluate"
    traces = datasets.load_from_disk(str(stage / "traces"))
    assert len(traces) == 9 and set(traces["method"]) == {"no_rag", "standard_rag", "oracle"}
    rag = traces.filter(lambda r: r["method"] == "standard_rag")
    assert all(rag["retrieved"]) and all(c == 1.0 for c in rag["retrieval_calls"])
    steps = json.loads(rag[0]["trace"])["steps"]
    assert [s["name"] for s in steps] == ["retrieve", "generate"] and len(steps[0]["detail"]["ids"]) == 2
    summary = json.loads((stage / "summary.json").read_text())["methods"]
    assert summary["no_rag"]["retrieval_rate"] == 0.0 and summary["standard_rag"]["lm_calls"] == 1.0
    assert summary["oracle"]["retrieval_rate"] == 1.0  # a random model is never right: oracle always retrieves
    report = (tmp_path / "report" / "report.md").read_text()
    assert "| standard_rag |" in report and (tmp_path / "report" / "methods_quality.png").is_file()
    assert "Whole pipeline from scratch" in report and "budget" not in report  # no budget set for this recipe
    rows = [report.index(f"| {m} |") for m in ("no_rag", "standard_rag", "oracle")]
    assert rows == sorted(rows)  # the recipe's order, not the JSON file's sorted keys

    from typer.testing import CliRunner

    from workbench.cli import app

    args = ["evaluate", "evaluate", *_overrides(tmp_path, tiny_lm_long_dir), "--methods", "no_rag", "--limit", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "no_rag" in result.output and "standard_rag" not in result.output
    # the first run generated these answers already; by default every method still makes its own (comparable cost)
    summary = json.loads((stage / "summary.json").read_text())
    assert summary["methods"]["no_rag"]["lm_calls"] == 1.0 and summary["reuse_generations"] is False
    # a generation cache of this test's own: another test in this worker may have answered the same prompts
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "own-cache"))
    calls = []
    for limit in ("2", "1"):  # the first fills the generation cache, the second answers from it
        result = CliRunner().invoke(app, [*args[:-1], limit, "evaluate.reuse_generations=true"])
        assert result.exit_code == 0, result.output
        summary = json.loads((stage / "summary.json").read_text())
        calls.append(summary["methods"]["no_rag"]["lm_calls"])
    assert calls == [1.0, 0.0] and summary["reuse_generations"] is True


def test_evaluate_refuses_unknown_methods_and_options(tmp_path, tiny_lm_long_dir):
    with pytest.raises(ConfigError, match="unknown or no method"):
        run_recipe(load_recipe("evaluate", _overrides(tmp_path, tiny_lm_long_dir, "evaluate.methods=[nope]")))
    with pytest.raises(ConfigError, match="needs the calibrate and classify"):
        run_recipe(load_recipe("evaluate", _overrides(tmp_path, tiny_lm_long_dir, "evaluate.methods=[d2rag]")))
