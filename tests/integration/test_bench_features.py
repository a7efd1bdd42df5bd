"""The bench-features recipe end to end, shrunk: tiny generator, real MiniLM answer-equivalence judge, and the
attention recorder's peak memory on a tiny random model (each way in a fresh process)."""

from __future__ import annotations

import json

import pytest

from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration


MEMORY_SHAPE = [  # a tiny model whose MLP activations stay far below the full-matrix scores at 1024 tokens
    "bench_features.attention_memory.contexts=[1024]",
    "bench_features.attention_memory.batch=2",
    "bench_features.attention_memory.hidden_size=64",
    "bench_features.attention_memory.heads=8",
    "bench_features.attention_memory.kv_heads=2",
    "bench_features.attention_memory.head_dim=16",
    "bench_features.attention_memory.intermediate_size=128",
    "bench_features.attention_memory.vocab_size=1000",
]


def _run(tmp_path, model, features: str, questions: int, samples: int, max_new_tokens: int, parts: str = "[cost]"):
    """The bench-features recipe on the tiny model, writing under ``tmp_path``."""
    overrides = [
        f"bench_features.parts={parts}",
        *MEMORY_SHAPE,
        f"generator.model={model}",
        "tracker=none",
        "threads=0",
        f"run_dir={tmp_path}/run",
        f"report.dir={tmp_path}/report",
        "data.max_per_template=20",
        f"bench_features.questions={questions}",
        f"bench_features.samples={samples}",
        f"bench_features.max_new_tokens={max_new_tokens}",
        f"bench_features.features={features}",
        "bench_features.repeats=2",
    ]
    return run_recipe(load_recipe("bench-features", overrides))


def test_bench_features_reports_both_ratios_and_the_attention_recorders_memory(tmp_path, tiny_lm_long_dir):
    features = "[confidence,semantic_entropy,matrix_degree_uncertainty,eccentricity_uncertainty,lars,ptrue]"
    parts = "[cost,attention_memory]"
    result = _run(tmp_path, tiny_lm_long_dir, features, questions=2, samples=3, max_new_tokens=4, parts=parts)
    bench = json.loads((tmp_path / "run" / "stages" / "bench_features" / "bench.json").read_text())
    assert len(bench["per_feature"]) == 6 and bench["questions"] == 2
    work, total, bare = bench["workbench"], bench["per_feature_total"], bench["bare"]
    # three graph features each build their own NLI matrix alone; the workbench builds it once
    assert total["nli_pairs"] >= 3 * work["nli_pairs"] > 0
    assert bench["library_total"]["token_forwards"] > total["token_forwards"]  # N re-encodings, one question at a time
    assert total["token_forwards"] > work["token_forwards"] >= bare["token_forwards"] > 0
    ratios = bench["ratios"]
    assert ratios["per_feature_over_workbench"]["token_forwards"] == pytest.approx(
        total["token_forwards"] / work["token_forwards"]
    )
    # the naive way: transformers generate, one question at a time, the prompt encoded once per sample
    naive = bench["naive"]
    assert naive["lm_calls"] == 2 * 2 and naive["token_forwards"] > bare["token_forwards"]
    for way in ("bare", "naive", "workbench", "workbench_core"):  # warm-up untimed, then 2 timed runs each
        assert len(bench[way]["seconds_runs"]) == 2
        assert bench[way]["seconds_min"] <= bench[way]["seconds"] <= bench[way]["seconds_max"]
    assert bench["core_features"] == [
        "confidence",
        "semantic_entropy",
        "matrix_degree_uncertainty",
        "eccentricity_uncertainty",
        "lars",
    ]  # ptrue prompts the model itself
    assert ratios["workbench_over_naive"]["seconds"] == pytest.approx(work["seconds"] / naive["seconds"])
    # where the workbench's time goes: every LM call and judge pair of its run charged to a stats-graph component
    parts = bench["workbench_components"]
    assert {"greedy", "samples", "self_check", "nli_answers"} <= set(parts)
    for key in ("lm_calls", "nli_pairs"):
        assert sum(part[key] for part in parts.values()) == pytest.approx(work[key]), key
    assert parts["self_check"]["lm_calls"] == 2 and parts["self_check"]["scored_tokens"] > 0  # one read a question
    assert 0 < sum(part["seconds"] for part in parts.values()) <= work["seconds_max"]
    report = (tmp_path / "report" / "report.md").read_text()
    assert "target ≥ 5x" in report and "≤ 2.5x" in report and "≤ 1x" in report and "| lars |" in report
    assert "transformers `generate`" in report and "TruthTorchLM" in report and "5 features" in report
    assert "## Where the workbench's time goes" in report and "| P(True) + Verbalized: self-check forward |" in report
    assert (tmp_path / "report" / "per_feature.png").stat().st_size > 1000
    # the attention recorder: the full-matrix way raises the prefill's peak by about its two (2, 8, 1024, 1024)
    # float32 arrays (134 MB); the recorder as it is, by a few MB (it reads the prefill's last query only)
    (row,) = bench["attention_memory"]["contexts"]
    rise = {way: r["peak_bytes"] - r["base_bytes"] for way, r in row["ways"].items()}
    assert row["before_analytic_bytes"] == 2 * 4 * 2 * 8 * 1024 * 1024
    assert rise["before"] - rise["none"] >= 0.6 * row["before_analytic_bytes"]
    assert rise["after"] - rise["none"] <= 0.25 * row["before_analytic_bytes"]
    assert "## Attention recorder: peak memory of a recording prefill" in report and "| 1,024 |" in report
    summary = next(s.summary for s in result.stages if s.name == "bench_features")
    assert summary["memory_context"] == 1024 and summary["forwards_ratio"] > 0


def test_bench_features_without_an_nli_feature_reports_no_nli_ratio(tmp_path, tiny_lm_long_dir):
    result = _run(tmp_path, tiny_lm_long_dir, "[confidence,entropy]", questions=1, samples=2, max_new_tokens=3)
    summary = next(s.summary for s in result.stages if s.name == "bench_features")
    assert summary["nli_ratio"] is None and summary["forwards_ratio"] > 0
    assert "n/a" in (tmp_path / "report" / "report.md").read_text()
