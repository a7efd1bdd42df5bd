"""The bench_gpu stage: its recipe and settings checks, the skip without CUDA (one log line, a skipped bench.json, a
short report naming the machine), and its measurements run on the CPU with a tiny random model (``device: cpu``, the
unit tests' setting): (a) collection and (c) decoding by :func:`measure_model`, then the whole stage with (b)
serve-model, and the report of a measured run."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.unit.stages.bench_context import bench_context
from tests.unit.stages.fake_build_data import write_build_data
from workbench.backends.cost import CostCounter
from workbench.bench.gpu import run as bench_gpu
from workbench.bench.gpu.settings import BenchGpuSection
from workbench.core.errors import ConfigError
from workbench.recipe import RecipeConfig, load_recipe
from workbench.uncertainty.features import SEED_FEATURES

QUESTIONS = ["Who wrote Hamlet?", "Which river flows through Paris?", "What is the capital of France?"]
PASSAGES = [
    ("hamlet", "Hamlet", "Hamlet is a tragedy written by William Shakespeare around 1600."),
    ("paris", "Paris", "Paris is the capital of France, on the river Seine."),
]
TINY = {  # the smallest useful measurement: both batch sizes, one timed run each
    "device": "cpu",
    "dtype": "float32",
    "models": ["tiny"],
    "questions": 2,
    "samples": 2,
    "max_new_tokens": 3,
    "paraphrases": 2,
    "batch_sizes": [1, 2],
    "decode_batch_sizes": [1, 2],
    "concurrency": [],
    "k": 1,
    "repeats": 1,
}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))


# ------------------------------------------------------------------ recipe and settings


def test_the_recipe_validates_with_the_gpu_defaults():
    config = load_recipe("bench-gpu").config
    assert config.stages == ["build_data", "bench_gpu", "report_bench_gpu"]
    section = config.bench_gpu
    assert section.device == "cuda" and section.dtype == "bfloat16"
    assert section.models == ["smollm2-135m", "llama-1b"] and section.features == list(SEED_FEATURES)
    assert section.batch_sizes == [1, 8, 32, 64] and section.concurrency == [1, 8, 32, 64]
    assert section.decode_batch_sizes == [1, 8, 32]


def test_the_named_shapes_are_the_models_they_name():
    smol, big = bench_gpu.MODEL_SHAPES["smollm2-135m"], bench_gpu.MODEL_SHAPES["llama-1b"]
    assert (smol.hidden, smol.layers, smol.heads, smol.kv_heads, smol.intermediate, smol.vocab) == (
        576,
        30,
        9,
        3,
        1536,
        49152,
    )
    assert (big.hidden, big.layers, big.heads, big.kv_heads, big.intermediate, big.vocab) == (
        2048,
        16,
        32,
        8,
        8192,
        128256,
    )


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("bench_gpu.device=tpu", "bench_gpu.device"),
        ("bench_gpu.models=[gpt-5]", "bench_gpu.models"),
        ("bench_gpu.models=[tiny,tiny]", "bench_gpu.models"),
        ("bench_gpu.features=[nope]", "bench_gpu.features"),
        ("bench_gpu.batch_sizes=[]", "bench_gpu.batch_sizes"),
        ("bench_gpu.concurrency=[8,8]", "bench_gpu.concurrency"),
        ("bench_gpu.alpha=-1", "bench_gpu.alpha"),
    ],
)
def test_a_setting_that_cannot_be_measured_is_a_one_line_error(override, key):
    with pytest.raises(ConfigError) as caught:
        load_recipe("bench-gpu", [override])
    assert key in str(caught.value) and "\n" not in str(caught.value)


def test_empty_serve_and_decoding_lists_are_allowed():
    config = load_recipe("bench-gpu", ["bench_gpu.concurrency=[]", "bench_gpu.decode_batch_sizes=[]"]).config
    assert config.bench_gpu.concurrency == [] and config.bench_gpu.decode_batch_sizes == []
    assert bench_gpu.questions_needed(config.bench_gpu) == 64  # the largest batch size


# ------------------------------------------------------------------ skip without CUDA


def make_ctx(tmp_path: Path, inputs: dict[str, Path], **settings) -> SimpleNamespace:
    config = RecipeConfig(name="bench-gpu-test", stages=["build_data"])
    config.report.dir = str(tmp_path / "report")
    for key, value in settings.items():
        setattr(config.bench_gpu, key, value)
    return bench_context(config, tmp_path, inputs, "workbench.stage.bench_gpu", rerun="workbench run bench-gpu")


def test_without_cuda_the_stage_skips_with_one_line_and_the_report_says_where(tmp_path, monkeypatch, caplog):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    ctx = make_ctx(tmp_path, {})  # no build_data input: a skip reads nothing
    with caplog.at_level(logging.DEBUG, logger="workbench"):
        summary = bench_gpu.run(ctx)
    assert summary == {"skipped": True}
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["bench_gpu: skipped — no CUDA device (torch.cuda.is_available() is False)"]
    bench = json.loads((ctx.out_dir / "bench.json").read_text())
    assert bench["skipped"] is True and bench["reason"] == bench_gpu.NO_CUDA
    assert bench["machine"]["cuda_available"] is False and bench["machine"]["cpus"] >= 1
    assert bench["settings"]["device"] == "cuda" and "models" not in bench

    report_ctx = SimpleNamespace(config=ctx.config, inputs={"bench_gpu": ctx.out_dir}, rerun=ctx.rerun)
    assert bench_gpu.report(report_ctx)["skipped"] is True
    report_dir = tmp_path / "report"
    text = (report_dir / "report.md").read_text()
    assert text.startswith("# GPU benchmark: skipped")
    assert bench_gpu.NO_CUDA in text and bench["machine"]["platform"] in text
    assert "only from a run on a machine with a CUDA GPU" in text
    assert sorted(p.name for p in report_dir.iterdir()) == ["report.md"]  # no plot of nothing


def test_a_missing_gpu_index_is_a_config_error_when_cuda_exists(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    ctx = make_ctx(tmp_path, {}, device="cuda:3")
    with pytest.raises(ConfigError, match="cuda:3"):
        bench_gpu.run(ctx)


# ------------------------------------------------------------------ measuring on the CPU, tiny model


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, tiny_lm_dir) -> tuple[Path, dict]:
    """The 'tiny' shape with random weights and the tiny tokenizer, saved as a model directory."""
    out = tmp_path_factory.mktemp("bench-gpu-model") / "tiny"
    shape = bench_gpu.build_random_model(bench_gpu.MODEL_SHAPES["tiny"], tiny_lm_dir, out, dtype="float32")
    return out, shape


def test_the_random_model_is_the_shape_with_the_tokenizer(tiny_model, tiny_lm_dir):
    from transformers import AutoConfig, AutoTokenizer

    path, shape = tiny_model
    config = AutoConfig.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_lm_dir)
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (64, 2, 4)
    assert config.num_key_value_heads == 2 and config.intermediate_size == 128
    assert config.vocab_size == len(tokenizer) == shape["vocab"]  # the tiny shape takes its tokenizer's width
    assert config.eos_token_id == tokenizer.eos_token_id
    assert AutoTokenizer.from_pretrained(path).get_vocab() == tokenizer.get_vocab()
    assert shape["parameters"] > 0 and shape["layers"] == 2


def test_measure_model_on_the_cpu_gives_rates_ratios_and_parity_per_batch_size(tiny_model, tiny_encoder_dir):
    from workbench.backends.factory import build_embedder
    from workbench.backends.nli import AnswerEquivalenceJudge

    path, shape = tiny_model
    section = BenchGpuSection(**TINY)
    counter = CostCounter()
    embedder = build_embedder(str(tiny_encoder_dir), cache=False, counter=counter)
    judge = AnswerEquivalenceJudge(embedder, counter=counter)
    rows = [{"question": q} for q in QUESTIONS]
    experts = [f"Context: {text}\nQuestion: {q}" for q, (_, _, text) in zip(QUESTIONS, PASSAGES, strict=False)]
    amateurs = [f"Question: {q}" for q in QUESTIONS[:2]]
    seen: list[tuple[int, int]] = []  # (collection entries, decoding entries) at each progress call
    result = bench_gpu.measure_model(
        path,
        section,
        device="cpu",
        dtype="float32",
        rows=rows,
        experts=experts,
        amateurs=amateurs,
        judge=judge,
        embedder=embedder,
        counter=counter,
        progress=lambda partial: seen.append((len(partial["collection"]), len(partial["decoding"]))),
    )
    # one progress call after each measurement, each seeing that measurement's entry
    assert seen == [(1, 0), (2, 0), (2, 1), (2, 2)]
    assert result["device"] == "cpu" and result["dtype"] == "float32"
    assert result["parameters"] == shape["parameters"] and result["weights_mb"] is None

    collection = result["collection"]
    assert [c["batch_size"] for c in collection] == [1, 2]
    for entry in collection:
        assert entry["questions"] == 2  # questions=2 fills both batch sizes
        assert entry["questions_per_s"] > 0 and entry["seconds"] > 0
        assert entry["questions_per_s"] == pytest.approx(2 / entry["seconds"])
        assert len(entry["seconds_runs"]) == 1 and entry["seconds_min"] <= entry["seconds"] <= entry["seconds_max"]
        assert entry["token_forwards"] > 0 and entry["lm_calls"] > 0 and entry["nli_pairs"] > 0
        assert entry["peak_memory_mb"] is None  # no CUDA: nothing to read
    # the same questions, features and seeds at every batch size: the same model calls, batched differently
    assert collection[0]["lm_calls"] == collection[1]["lm_calls"]

    decoding = result["decoding"]
    assert [r["pairs"] for r in decoding] == [1, 2]
    for r in decoding:
        assert isinstance(r["parity"], bool) and r["ignore_eos"] is True
        assert r["steps"]["greedy"] == r["pairs"] * section.max_new_tokens  # EOS off: every answer runs to the cap
        for key in ("ratio_batched_vs_greedy", "ratio_sequential_vs_greedy", "speedup_batched_vs_sequential"):
            assert math.isfinite(r[key]) and r[key] > 0, key
        assert r["peak_memory_mb"] is None


def test_measure_model_refuses_too_few_rows_or_pairs(tiny_model):
    path, _ = tiny_model
    section = BenchGpuSection(**TINY)
    common = {"device": "cpu", "dtype": "float32", "judge": None, "embedder": None, "counter": CostCounter()}
    with pytest.raises(ValueError, match="rows"):
        bench_gpu.measure_model(path, section, rows=[{"question": "q"}], experts=[], amateurs=[], **common)
    with pytest.raises(ValueError, match="pairs"):
        rows = [{"question": q} for q in QUESTIONS]
        bench_gpu.measure_model(path, section, rows=rows, experts=["a"], amateurs=["b"], **common)


# ------------------------------------------------------------------ the whole stage on the CPU, serve-model included


@pytest.fixture(scope="module")
def build_data_dir(tmp_path_factory) -> Path:
    """A build_data output: ``qa/`` (a three-question ``test`` split) and ``corpus/`` (one chunk per passage)."""
    return write_build_data(tmp_path_factory.mktemp("build_data"), QUESTIONS, PASSAGES)


STAGE_FEATURES = ["confidence", "semantic_entropy", "attention_score", "ptrue"]
"""The whole stage's test collects a few features (measure_model's test collects all 18): one of them, attention,
is not in the OpenAI protocol, so serve-model leaves it out."""


@pytest.fixture(scope="module")
def finished(tmp_path_factory, build_data_dir, tiny_lm_dir, tiny_encoder_dir):
    """The stage and its report run once on the CPU: (summary, bench.json, report directory)."""
    tmp = tmp_path_factory.mktemp("bench-gpu-run")
    settings = {
        **TINY,
        "features": STAGE_FEATURES,
        "batch_sizes": [2],
        "decode_batch_sizes": [1],
        "concurrency": [1, 2],
    }
    ctx = make_ctx(tmp, {"build_data": build_data_dir}, **settings)
    ctx.config.generator.model = str(tiny_lm_dir)  # the tokenizer every shape takes, and the prompts' renderer
    ctx.config.generator.cache = False
    ctx.config.embedder.model = str(tiny_encoder_dir)
    summary = bench_gpu.run(ctx)
    report_ctx = SimpleNamespace(config=ctx.config, inputs={"bench_gpu": ctx.out_dir}, rerun=ctx.rerun)
    bench_gpu.report(report_ctx)
    return summary, json.loads((ctx.out_dir / "bench.json").read_text()), tmp / "report"


def test_the_stage_measures_every_part_on_the_cpu(finished):
    summary, bench, _ = finished
    assert bench["skipped"] is False and bench["device"]["kind"] == "cpu" and bench["threads"] >= 1
    assert bench["dtype"] == "float32" and bench["no_context"] == 0
    (model,) = bench["models"]
    assert model["name"] == "tiny" and model["shape"]["hidden"] == 64
    assert [c["batch_size"] for c in model["collection"]] == [2] and model["collection"][0]["questions_per_s"] > 0
    assert [r["pairs"] for r in model["decoding"]] == [1]
    serve = model["serve"]
    assert [level["concurrency"] for level in serve["levels"]] == [1, 2]
    assert serve["server_batch_size"] == 2
    # served models give no attention weights: that feature is listed with what it lacks, the rest collected
    assert serve["features"] == ["confidence", "semantic_entropy", "ptrue"] and list(serve["skipped"]) == [
        "attention_score"
    ]
    for level in serve["levels"]:
        assert level["questions"] == 2 and level["questions_per_s"] > 0 and level["server_memory_mb"] is None
    assert summary["skipped"] is False and summary["tiny_collect_questions_per_s"] > 0
    assert summary["tiny_served_questions_per_s"] > 0 and summary["tiny_contrastive_ratio"] > 0
    assert summary["tiny_peak_memory_mb"] is None
    # the partial record is gone once bench.json is written
    assert not (finished[2].parent / "out" / bench_gpu.PARTIAL).exists()


def test_the_report_of_a_cpu_run_says_it_is_no_gpu_figure(finished):
    report_dir = finished[2]
    text = (report_dir / "report.md").read_text()
    assert "**CPU**" in text and "say nothing about a GPU" in text
    for heading in ("## (a) Feature collection", "## (b) serve-model", "## (c) Contrastive decoding", "## (d) Peak"):
        assert heading in text
    assert sorted(p.name for p in report_dir.glob("*.png")) == ["collection.png", "decoding.png", "serve.png"]


def test_the_report_of_a_gpu_run_names_the_card_and_the_versions(finished, tmp_path):
    from workbench.bench.gpu.report import write_gpu_report

    _, bench, _ = finished
    bench["device"] = {  # the record a CUDA run writes (device_description), on the CPU figures
        "device": "cuda",
        "kind": "cuda",
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "memory_gib": 79.2,
        "capability": "9.0",
        "torch": "2.5.1+cu124",
        "cuda": "12.4",
        "cudnn": 90100,
    }
    bench["dtype"] = "bfloat16"
    text = write_gpu_report(bench, tmp_path, name="bench-gpu", rerun="workbench run bench-gpu").read_text()
    header = text.split("## Models")[0]
    assert "**NVIDIA H100 80GB HBM3**" in header and "torch 2.5.1+cu124" in header and "CUDA 12.4" in header
    assert "**bfloat16**" in header and f"**{bench['threads']} torch CPU thread(s)**" in header
    assert "say nothing about a GPU" not in text
    rows = [line for line in text.splitlines() if line.startswith("| `tiny` |")]
    assert len(rows) == 1 + 1 + 2 + 1  # the model, (a) at B = 2, (b) at concurrency 1 and 2, (c) at one pair
    assert "`attention_score` (needs attentions)" in text
    assert "Partial run" not in text


def test_a_partial_record_renders_what_was_measured_and_says_so(finished, tmp_path):
    from workbench.bench.gpu.report import write_gpu_report

    _, bench, _ = finished
    (model,) = bench["models"]
    partial = {**bench, "partial": True, "models": [{**model, "decoding": [], "serve": None}]}
    text = write_gpu_report(partial, tmp_path, name="bench-gpu", rerun="workbench run bench-gpu").read_text()
    assert "**Partial run**" in text
    assert "## (a) Feature collection" in text
    rows = [line for line in text.splitlines() if line.startswith("| `tiny` |")]
    assert len(rows) == 1 + 1  # the model and (a) at B = 2: neither (b) nor (c) was reached


def test_models_measured_at_different_levels_share_one_plot_per_measurement(finished, tmp_path):
    import copy

    from workbench.bench.gpu.report import _aligned, write_gpu_report

    _, bench, _ = finished
    (model,) = bench["models"]
    other = copy.deepcopy(model)
    other["name"] = "other"
    other["serve"]["levels"] = other["serve"]["levels"][:1]  # measured at concurrency 1 only (a run joined later)
    joined = {**bench, "models": [model, other]}
    write_gpu_report(joined, tmp_path, name="bench-gpu", rerun="workbench run bench-gpu")
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["collection.png", "decoding.png", "serve.png"]
    levels, series = _aligned(joined["models"], ("serve", "levels"), "concurrency", "questions_per_s")
    assert levels == [1, 2] and series["tiny"][1] > 0 and math.isnan(series["other"][1])
