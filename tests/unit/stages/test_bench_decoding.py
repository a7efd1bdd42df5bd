"""The bench_decoding stage and its report on a tiny random model and a five-question dataset; its config errors."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.toy_corpus import PASSAGES
from tests.unit.stages.bench_context import bench_context
from tests.unit.stages.fake_build_data import write_build_data
from workbench.bench.decoding import run as bench_decoding
from workbench.bench.decoding.report import decoding_section
from workbench.core.errors import ConfigError
from workbench.recipe import RecipeConfig

QUESTIONS = [
    "What is the capital of France?",
    "Who wrote Hamlet?",
    "Where does the Seine flow?",
    "Where was William Shakespeare born?",
    "Which river flows through Lyon?",
]


@pytest.fixture(scope="module")
def build_data_dir(tmp_path_factory) -> Path:
    """A build_data output: ``qa/`` (a five-question ``test`` split) and ``corpus/`` (one chunk per passage: the first
    five toy passages)."""
    return write_build_data(tmp_path_factory.mktemp("build_data"), QUESTIONS, PASSAGES[:5])


@pytest.fixture(scope="module")
def peaked_lm_dir(tmp_path_factory) -> Path:
    """A tiny random Llama with large weights (peaked distributions: no near-ties between batch shapes)."""
    from tests.tiny_models import build_tiny_llama

    path = tmp_path_factory.mktemp("tiny-llama-peaked")
    return build_tiny_llama(path, seed=1, max_positions=4096, tie_embeddings=False, initializer_range=1.0)


def make_ctx(tmp_path: Path, build_data: Path, model: Path, **settings) -> SimpleNamespace:
    """A stage context: a fresh config (bench_decoding keys from ``settings``), real Resources, a fresh out_dir."""
    config = RecipeConfig(name="bench-decoding-test", stages=["build_data"])
    config.generator.model = str(model)
    config.generator.cache = False
    config.report.dir = str(tmp_path / "report")
    section = config.bench_decoding
    section.batch_sizes, section.repeats, section.max_new_tokens, section.k = [1, 2], 1, 3, 2
    section.min_seconds = 0.0
    for key, value in settings.items():
        setattr(section, key, value)
    return bench_context(config, tmp_path, {"build_data": build_data}, "test.bench_decoding")


@pytest.fixture(scope="module")
def finished(tmp_path_factory, build_data_dir, peaked_lm_dir):
    """Run the stage and its report once: (summary, bench.json, report text, report directory)."""
    tmp = tmp_path_factory.mktemp("bench-decoding")
    ctx = make_ctx(tmp, build_data_dir, peaked_lm_dir)
    summary = bench_decoding.run(ctx)
    report_ctx = SimpleNamespace(config=ctx.config, inputs={"bench_decoding": ctx.out_dir})
    bench_decoding.report(report_ctx)
    bench = json.loads((ctx.out_dir / "bench.json").read_text())
    report_dir = tmp / "report"
    return summary, bench, (report_dir / "report.md").read_text(), report_dir


def test_bench_json_has_one_result_per_batch_size(finished):
    summary, bench, _, _ = finished
    assert [r["pairs"] for r in bench["results"]] == [1, 2]
    assert bench["settings"]["batch_sizes"] == [1, 2] and bench["settings"]["max_new_tokens"] == 3
    assert bench["threads"] >= 1 and bench["device"] == "cpu" and bench["no_context"] == 0
    for r in bench["results"]:
        assert r["parity"] is True
        # every variant decodes exactly max_new_tokens steps (EOS and stop strings off): one forward per step after
        # the first (two for the sequential engine's two decoders); the rest are prefill forwards
        steps = bench["settings"]["max_new_tokens"] - 1
        prefill = {k: n - steps * (2 if k == "sequential" else 1) for k, n in r["forwards"].items()}
        # the experts' prefill is greedy's (a prefix forward of its own where two rows share the system prompt);
        # the batched engine adds the amateurs': continuing the experts' rows over the prompt both streams share
        # (one forward, no prefix forward) or, where that saves fewer tokens, as the sequential engine's second
        # decoder prefills them
        assert r["forwards"]["greedy"] >= 1 and prefill["greedy"] >= 1
        assert prefill["sequential"] >= prefill["batched"] >= prefill["greedy"] + 1
        assert prefill["padded"] == 1  # one forward for both streams (no prefix reuse: the cache counts as unjoinable)
        if r["pairs"] == 1:  # nothing to share within a stream; the amateur continues the expert's system prompt
            assert r["costs"]["sequential"]["prefix_reused_tokens"] == 0 < r["costs"]["batched"]["prefix_reused_tokens"]
        assert r["costs"]["batched"]["lm_batches"] == 1 and r["costs"]["sequential"]["lm_batches"] == 2
        for key in (
            "ratio_batched_vs_greedy",
            "ratio_sequential_vs_greedy",
            "speedup_batched_vs_sequential",
            "ratio_per_forward_batched_vs_greedy",
        ):
            assert math.isfinite(r[key]) and r[key] > 0, key
        assert len(r["times_s"]["greedy"]) == 1
    assert summary["pairs"] == 2 and summary["parity"] is True
    assert summary["ratio_batched_vs_greedy"] == pytest.approx(bench["results"][1]["ratio_batched_vs_greedy"], abs=1e-3)


def test_bench_json_records_the_thread_counts_and_the_harness_timings(finished):
    _, bench, _, _ = finished
    assert bench["thread_counts"]["torch"] == bench["threads"]
    assert set(bench["thread_counts"]) == {"torch", "omp_num_threads", "blas"}
    for r in bench["results"]:  # ratios of the medians of the same rounds
        assert r["speedup_batched_vs_sequential"] == pytest.approx(r["sequential_s"] / r["batched_s"])
        assert r["batched_s"] == sorted(r["times_s"]["batched"])[len(r["times_s"]["batched"]) // 2]


def test_expert_prompts_carry_the_retrieved_context(build_data_dir, peaked_lm_dir, tmp_path):
    import datasets

    ctx = make_ctx(tmp_path, build_data_dir, peaked_lm_dir)
    corpus = datasets.load_from_disk(str(build_data_dir / "corpus"))
    experts, amateurs, no_context = bench_decoding.build_pairs(ctx, QUESTIONS[:2], corpus)
    assert no_context == 0
    assert "Paris is the capital" in experts[0] and "Paris is the capital" not in amateurs[0]
    assert "Hamlet is a tragedy" in experts[1] and QUESTIONS[1] in amateurs[1]


def test_report_has_the_table_rows_and_plot(finished):
    _, bench, report, report_dir = finished
    assert report.startswith("# Contrastive decoding cost")
    assert "torch thread(s)" in report and "**cpu**" in report
    assert "| pairs | greedy s | batched s | sequential s |" in report
    for r in bench["results"]:
        forwards = f"{r['forwards']['greedy']} / {r['forwards']['batched']} / {r['forwards']['sequential']}"
        row = next(line for line in report.splitlines() if line.startswith(f"| {r['pairs']} |"))
        assert forwards in row and f"{r['ratio_batched_vs_greedy']:.2f}x" in row
        assert row.endswith(f"| yes | {'yes' if r['meets_target'] else '**no**'} |")
    assert "target (batched contrastive ≤ 1.3x greedy)" in report and "2B rows" in report
    prefill_rows = [line for line in report.splitlines() if line.count("|") == 6 and line[2:3].isdigit()]
    assert len(prefill_rows) == len(bench["results"])  # the split-vs-padded prefill table
    assert all(f"{r['speedup_split_vs_padded_prefill']:.2f}x |" in report for r in bench["results"])
    assert (report_dir / "seconds.png").stat().st_size > 1000


def test_a_runs_main_report_carries_the_benchmark_as_a_section(finished, tmp_path):
    _, bench, report, report_dir = finished
    bench_dir = report_dir.parent / "out"
    lines = decoding_section(bench_dir, tmp_path, "evaluate")
    assert lines[0] == "## Contrastive decoding cost"
    assert "![seconds per variant](decoding_seconds.png)" in lines
    assert (tmp_path / "decoding_seconds.png").stat().st_size > 1000
    table = [line for line in lines if line.startswith("| ") and line.count("|") == 12]  # the main table
    assert len(table) == 1 + len(bench["results"]) and all(row in report for row in table)  # header + rows


@pytest.mark.parametrize(
    ("settings", "key", "message"),
    [
        ({"batch_sizes": []}, "bench_decoding.batch_sizes", "at least one batch size"),
        ({"batch_sizes": [2, 0]}, "bench_decoding.batch_sizes", "must be >= 1"),
        ({"repeats": 0}, "bench_decoding.repeats", "must be >= 1"),
        ({"max_new_tokens": 0}, "bench_decoding.max_new_tokens", "must be >= 1"),
        ({"split": "nope"}, "bench_decoding.split", "not in the dataset"),
        ({"batch_sizes": [1, 6]}, "bench_decoding.batch_sizes", "needs 6 questions"),
    ],
)
def test_config_errors(tmp_path, build_data_dir, settings, key, message):
    ctx = make_ctx(tmp_path, build_data_dir, tmp_path / "no-model", **settings)  # fails before any model loads
    with pytest.raises(ConfigError, match=message) as caught:
        bench_decoding.run(ctx)
    assert caught.value.where == key
    assert "\n" not in str(caught.value)
    assert not (ctx.out_dir / "bench.json").exists()
