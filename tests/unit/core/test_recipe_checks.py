"""Settings refused when the recipe loads, not after the stages before the one that needs them ran: negative or
zero counts, devices, splits, and every requirement one stage has on another's settings. Each error is one line
naming the key and where it was set (file:line, or the command line)."""

from __future__ import annotations

import pytest

from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe


def refused(recipe: str, *overrides: str) -> str:
    """The one-line message of the ConfigError loading ``recipe`` with ``overrides`` raises."""
    with pytest.raises(ConfigError) as info:
        load_recipe(recipe, list(overrides))
    text = str(info.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("answer.limit=-1", "command line: answer.limit: must be >= 1, got -1"),
        ("answer.limit=0", "answer.limit: must be >= 1, got 0"),
        ("collect.limit=-5", "collect.limit: must be >= 1"),
        ("evaluate.limit=-1", "evaluate.limit: must be >= 1"),
        ("fit_utility.limit=-2", "fit_utility.limit: must be >= 1"),
        ("bench.questions=-1", "bench.questions: must be >= 1"),  # a section the recipe does not run, still wrong
        ("generator.batch_size=0", "generator.batch_size: must be >= 1"),
        ("retrieval.k=-3", "retrieval.k: must be >= 1"),
        ("classify.seeds=[0,-1]", "classify.seeds: must be >= 0, got -1"),
        ("bench.ks=[1,-5]", "bench.ks: must be >= 1, got -5"),
        ("seed=-1", "seed: must be >= 0"),
        ("threads=-2", "threads: must be >= 0"),
        ("calibrate.folds=1", "calibrate.folds: must be >= 2"),
        ("collect.temperature=-0.5", "collect.temperature: must be >= 0"),
        ("data.fractions=[0.5,0.5,0.5,-0.5]", "data.fractions: needs four non-negative numbers"),
        ("data.fractions=[0.5,0.5]", "data.fractions: needs four non-negative numbers"),
        ("data.chunking=fixed", "data.chunk_overlap: must be < data.chunk_size (600), got 600"),
    ],
)
def test_negative_counts_and_limits_are_refused(override, expected):
    extra = ["data.chunk_overlap=600"] if override == "data.chunking=fixed" else []
    assert expected in refused("quickstart", override, *extra)


def test_zero_is_fine_where_it_means_something():
    config = load_recipe("quickstart", ["threads=0", "seed=0", "data.chunk_overlap=0", "answer.limit=null"]).config
    assert config.threads == 0 and config.answer.limit is None


def test_the_error_names_the_file_and_line(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nstages: [build_data, answer]\nanswer:\n  limit: -1\ngenerator:\n  device: tpu\n")
    assert f"{path}:4: answer.limit: must be >= 1, got -1" in refused(str(path))
    assert f"{path}:6: generator.device: unknown device 'tpu'" in refused(str(path), "answer.limit=3")


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # classify ← collect
        (["collect.labels=[seper]"], "collect.labels: classify's routing table needs answers with retrieval"),
        (["collect.splits=[calib]"], "collect.splits: classify evaluates on a collected split besides"),
        # calibrate ← collect
        (["calibrate.fit_split=val"], "calibrate.fit_split: 'val' is not among collect.splits"),
        (["calibrate.label=delta_seper_h", "collect.labels=[rag]"], "calibrate.label: label 'delta_seper_h' is not"),
        (["calibrate.label=nope"], "calibrate.label: label 'nope' is not collected"),
        (["calibrate.features=[confidence,nope]"], "calibrate.features: ['nope']: give features of collect.features"),
        # every split a stage reads exists and gets questions
        (["answer.split=nope"], "answer.split: answer reads split 'nope'; the dataset has train, calib, val, test"),
        (["data.fractions=[0,0,0,1]"], "collect.splits: collect reads split 'calib', which gets no questions"),
        (["data.dataset=x.jsonl", "collect.splits=[calib,ood]"], "collect reads split 'ood'; the dataset has"),
        (["data.ood_topics=[]", "evaluate.split=ood"], "evaluate.split: evaluate reads split 'ood', which gets no"),
        # evaluate ← calibrate, classify
        (["stages=[build_data,evaluate]", "evaluate.methods=[d2rag]"], "d2rag needs the calibrate and classify"),
        # fit_utility → evaluate: the STAGE_AGREEMENTS table (every pair: tests/unit/core/test_stage_agreements.py)
        (["fit_utility.k=4"], "fit_utility.k: is 4 but evaluate.options.d2rag.k is 2"),
        (["fit_utility.passage_chars=300"], "fit_utility.passage_chars: is 300 but evaluate.passage_chars is 200"),
        (["evaluate.max_new_tokens=8"], "fit_utility.max_new_tokens: is 16 but evaluate.max_new_tokens is 8"),
        (["evaluate.options.d2rag.tau_pos=0.2"], "fit_utility.tau_pos: is 0.12 but evaluate.options.d2rag.tau_pos"),
        # report ← anything it shows
        (["stages=[build_data,report]"], "stages: the report stage needs one of answer, collect"),
        # export ← calibrate, classify (d2rag), and some gold-free method
        (["stages=[build_data,evaluate,export]", "evaluate.methods=[oracle]"], "no gold-free method to export"),
        (["stages=[build_data,export]", "export.methods=[d2rag]"], "d2rag needs the calibrate and classify"),
        # the stages' own section checks, now at load
        (["collect.shard=3/2"], "collect.shard: shard '3/2' needs 0 <= i < N"),
        (["collect.features=[nope]"], "command line: collect.features: unknown feature(s) ['nope']"),
        (["fit_utility.limit=3"], "fit_utility.limit: needs at least folds=5 questions"),
        (["generator.device=cuda:x"], "command line: generator.device: unknown device 'cuda:x'"),
    ],
)
def test_cross_stage_requirements_fail_at_load(overrides, expected):
    assert expected in refused("quickstart", *overrides)


def test_bench_features_names_are_checked_at_load():
    assert "bench_features.features: unknown feature(s) ['nope']" in refused(
        "bench-features", "bench_features.features=[nope]"
    )


@pytest.mark.parametrize(
    "overrides",
    [
        ["fit_utility.k=3", "evaluate.options.d2rag.k=3"],  # D²-RAG's k follows
        ["fit_utility.k=3", "evaluate.methods=[no_rag,dtr]"],  # nothing reads the predictor
        ["retrieval.k=3"],  # D²-RAG's k is its own, not retrieval.k
        ["evaluate.max_new_tokens=8", "fit_utility.max_new_tokens=8"],
        # a test-only dataset (answered by the base: the reader's training articles would all be test articles)
        ["data.fractions=[0,0,0,1]", "stages=[build_data,answer,report]", "generator.model=smollm2"],
        [
            "data.dataset=x.jsonl",
            "data.fractions=[0,0,0,1]",
            "stages=[build_data,evaluate]",
            "evaluate.methods=[no_rag]",
        ],
        ["generator.device=auto"],
        ["generator.device=cuda:3"],  # whether the GPU exists is checked when the model loads
    ],
)
def test_consistent_settings_load(overrides):
    assert load_recipe("quickstart", overrides).config.name == "quickstart"
