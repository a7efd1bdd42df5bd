"""The train-nli and bench-backends recipes end to end, shrunk: real MiniLM and Wikipedia pairs, tiny generator."""

from __future__ import annotations

import json

import pytest

from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration


def test_train_nli_then_bench_backends(tmp_path, tiny_lm_long_dir):
    common = [f"generator.model={tiny_lm_long_dir}", "tracker=none", "threads=0"]
    nli_run = run_recipe(
        load_recipe(
            "train-nli",
            [
                *common,
                f"run_dir={tmp_path}/nli",
                f"report.dir={tmp_path}/nli-report",
                "train_nli.max_train_pairs=32",
                "train_nli.max_val_pairs=16",
                "train_nli.eval_pairs=12",
                "train_nli.answer_pairs=10",
            ],
        )
    )
    model_dir = tmp_path / "nli" / "stages" / "train_nli" / "model"
    assert (model_dir / "model.safetensors").is_file() and (model_dir / "workbench_nli.json").is_file()
    judges = json.loads((tmp_path / "nli" / "stages" / "eval_nli" / "judges.json").read_text())["judges"]
    assert set(judges) == {"answer_equivalence", "cross_encoder", "llm"}
    assert judges["answer_equivalence"]["short_answers"]["n"] == 28  # 10 generated + 18 built-in
    assert nli_run.stage("eval_nli").summary["best_short_answer_judge"] in judges
    report = (tmp_path / "nli-report" / "report.md").read_text()
    assert "| cross_encoder |" in report and "| llm |" in report

    run_recipe(
        load_recipe(
            "bench-backends",
            [
                *common,
                f"run_dir={tmp_path}/bench",
                f"report.dir={tmp_path}/bench-report",
                f"nli.model={model_dir}",
                "data.max_per_template=30",
                "bench.questions=2",
                "bench.samples=3",
                "bench.max_new_tokens=4",
                "bench.repeats=1",
                "bench.nli_pairs=8",
                "bench.retrieval_questions=20",
                "bench.corpus_size=150",
            ],
        )
    )
    bench = json.loads((tmp_path / "bench" / "stages" / "bench_backends" / "bench.json").read_text())
    for row in bench["generation"].values():
        assert row["naive_prefill_tokens"] == 3 * row["shared_prefill_tokens"]  # N re-encodings vs one prefill
    assert bench["retrieval"]["passages"] == 150 and 0.0 <= bench["retrieval"]["bm25"]["recall@5"] <= 1.0
    assert "skipped" not in bench["nli"]["cross_encoder"]
    report = (tmp_path / "bench-report" / "report.md").read_text()
    assert "shared prefill" in report and "| hybrid |" in report
