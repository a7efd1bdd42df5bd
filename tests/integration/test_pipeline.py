"""The quickstart pipeline end to end: build_data → answer → collect → report, caching and resumption.

Uses the real embedded Wikipedia summaries and BM25 with the tiny random Llama (fast), and once with the real
SmolLM2 on two questions. A random model answers nothing right, so its labels have one class and the calibrate /
classify stages are left out here (they are tested on a synthetic collection in tests/unit/core).
"""

from __future__ import annotations

import json

import pytest

from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration


def quickstart(tmp_path, model, *extra):
    overrides = [
        f"generator.model={model}",
        f"run_dir={tmp_path}/run",
        f"report.dir={tmp_path}/report",
        "tracker=none",
        "threads=0",
        "answer.limit=4",
        "answer.max_new_tokens=6",
        "data.max_per_template=40",
        "stages=[build_data,answer,collect,report]",
        "collect.limit=4",
        "collect.samples=2",
        "collect.max_new_tokens=4",
        "collect.features=[confidence,semantic_entropy,ptrue]",
        *extra,
    ]
    return run_recipe(load_recipe("quickstart", overrides))


def test_quickstart_with_tiny_model_caches_and_reports(tmp_path, tiny_lm_long_dir):
    first = quickstart(tmp_path, tiny_lm_long_dir)
    assert [s.cached for s in first.stages] == [False, False, False, False]
    summary = json.loads((tmp_path / "run" / "stages" / "answer" / "summary.json").read_text())
    assert set(summary["modes"]) == {"closed_book", "rag"}
    assert summary["modes"]["rag"]["prompt_tokens"] > summary["modes"]["closed_book"]["prompt_tokens"]
    assert 0.0 <= summary["modes"]["rag"]["recall_at_k"] <= 1.0
    report = (tmp_path / "report" / "report.md").read_text()
    assert "| closed-book | 4 |" in report and (tmp_path / "report" / "quality.png").stat().st_size > 1000
    assert "| semantic_entropy |" in report and (tmp_path / "report" / "feature_auroc.png").is_file()
    assert "(budget 600 s on 2 cores: within)" in report  # the quickstart's report.budget_seconds
    # the header gives the command that made it: the recipe as asked for and every override, quoted for a shell
    assert (
        f"Regenerate with `workbench run quickstart generator.model={tiny_lm_long_dir} run_dir={tmp_path}/run" in report
    )
    assert "'stages=[build_data,answer,collect,report]'" in report
    # the findings open the report and end the run (with the report's path), the same lines
    top = report.split("## Findings\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert top[0].startswith("- Answers (") and [f"- {line}" for line in first.findings[:-1]] == top
    assert first.findings[-1] == f"Report: {tmp_path}/report/report.md"
    assert (tmp_path / "report" / "by_template.png").stat().st_size > 1000

    import datasets

    answers = datasets.load_from_disk(str(tmp_path / "run" / "stages" / "answer" / "answers"))
    assert len(answers) == 8 and all(
        len(ids) == 2 for ids in answers.filter(lambda r: r["mode"] == "rag")["retrieved_ids"]
    )

    second = quickstart(tmp_path, tiny_lm_long_dir)
    assert [s.cached for s in second.stages] == [True, True, True, False]  # the report is always rewritten

    third = quickstart(tmp_path, tiny_lm_long_dir, "retrieval.k=3")
    assert [s.cached for s in third.stages] == [True, False, False, False]  # collect retrieves: retrieval.k counts
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["stages"]["answer"]["cached"] is False and "answers/dataset_info.json" in str(
        manifest["stages"]["answer"]["files"]
    )


def test_quickstart_with_smollm2_answers(tmp_path, smollm2_dir):
    result = quickstart(tmp_path, "smollm2", "answer.limit=2", "answer.max_new_tokens=12", "collect.limit=2")
    summary = result.stage("answer").summary
    assert summary["n_questions"] == 2
    examples = json.loads((tmp_path / "run" / "stages" / "answer" / "examples.json").read_text())
    assert all(ex["pred_closed_book"] and ex["pred_rag"] for ex in examples)
