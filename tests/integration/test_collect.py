"""The collect stage end to end on the tiny Llama: outputs, interruption + resume, shards + merge."""

from __future__ import annotations

import json
import math
import shutil

import pytest

import workbench.stages.collect.run as collect
from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

FEATURES = ["confidence", "dtr_nll", "entropy", "semantic_entropy", "ptrue", "verbalized_confidence", "dense"]
VARYING = {*collect.COST_COLUMNS, "label_seconds", "stat_cost", "rag_retriever_seconds", "rag_answer_seconds"}


def _recipe(tmp_path, model, encoder):
    text = f"""
name: collect-test
stages: [build_data, collect]
run_dir: {tmp_path}/run
tracker: none
generator: {{model: {model}, batch_size: 8}}
embedder: {{model: {encoder}}}
data: {{max_per_template: 20}}
collect:
  splits: [calib, test]
  limit: 4
  features: {FEATURES}
  labels: [rag, seper, llm_judge]
  samples: 3
  seper_samples: 3
  dense_rephrase_tokens: 6
  max_new_tokens: 4
  batch_questions: 2
retrieval: {{backend: bm25, k: 2}}
"""
    path = tmp_path / "collect-test.yaml"
    path.write_text(text)
    return str(path)


def _rows(folder, split):
    import datasets

    rows = datasets.load_from_disk(str(folder / split)).to_list()
    return [{k: v for k, v in r.items() if k not in VARYING} for r in rows]


def _same(a, b, rel=0.0):
    """Row-by-row equality; ``rel`` > 0 lets floats (also inside lists) differ by that relative amount.

    Shards batch different questions together, so the padded batch shapes (and the order of the floating-point
    reductions in the kernels) differ from the unsharded run: scores computed outside the generation cache, such as
    P(True), can then move in the 7th digit, differently on different CPUs. Resuming reuses the same batches and must
    match exactly."""
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            _same_value(x[key], y[key], rel, key)


def _same_value(x, y, rel, key):
    if isinstance(x, float) and math.isnan(x):
        assert isinstance(y, float) and math.isnan(y), key
    elif isinstance(x, float) and rel:
        assert x == pytest.approx(y, rel=rel, abs=rel), key
    elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        for u, v in zip(x, y, strict=True):
            _same_value(u, v, rel, key)
    else:
        assert x == y, key


def _stat_costs(folder):
    """``stat_costs.json`` of a collect output, checked against what its features need."""
    from workbench.uncertainty.stat_costs import feature_components, load_stat_costs

    costs = load_stat_costs(folder)
    assert costs is not None and set(costs["features"]) == set(FEATURES)
    assert set(costs["splits"]) == set(costs["retrieval"]) == {"calib", "test"}
    for split, info in costs["splits"].items():
        assert info["questions"] == 4 and set(info["per_question"]) == feature_components(FEATURES), split
        assert info["per_question"]["greedy"]["lm_calls"] >= 1 and info["per_question"]["nli_answers"]["nli_pairs"] > 0
        assert set(costs["retrieval"][split]) == {
            "retriever_seconds",
            "rag_answer_seconds",
            "rag_prompt_tokens",
            "rag_new_tokens",
        }
        assert costs["retrieval"][split]["retriever_seconds"] > 0 < costs["retrieval"][split]["rag_answer_seconds"]
    return costs


_COUNTED = ("lm_calls", "prefill_tokens")


def _counts(costs):
    """The per-question LM calls and prompt tokens of each component (what a warm cache cannot change)."""
    return {
        split: {f"{c}.{k}": round(v[k], 6) for c, v in info["per_question"].items() for k in _COUNTED}
        for split, info in costs["splits"].items()
    }


def merge_two_shards(tmp_path, run_shard):
    """Run the collect stage as shard 0 and 1 of 2 (``run_shard(i)`` runs one and returns the stage directory), keep a
    copy of each (``tmp_path/shard<i>``), check the test split was dealt by position (shard 1 holds 1 and 3), and
    merge the copies with ``workbench merge`` into ``tmp_path/merged``; returns the copies."""
    from typer.testing import CliRunner

    from workbench.cli import app

    shard_dirs = []
    for i in range(2):
        shutil.copytree(run_shard(i), tmp_path / f"shard{i}")
        shard_dirs.append(tmp_path / f"shard{i}")
    assert [r["position"] for r in _rows(shard_dirs[1], "test")] == [1, 3]
    result = CliRunner().invoke(app, ["merge", str(tmp_path / "merged"), *map(str, shard_dirs)])
    assert result.exit_code == 0, result.output
    assert "test: 4" in result.output
    return shard_dirs


def test_collect_resumes_and_merges_shards(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, monkeypatch):
    recipe = _recipe(tmp_path, tiny_lm_long_dir, tiny_encoder_dir)
    stage_dir = tmp_path / "run" / "stages" / "collect"
    real = collect._collect_chunk
    calls = []

    def failing(*args, **kwargs):
        if len(calls) == 2:
            raise RuntimeError("interrupted")
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(collect, "_collect_chunk", failing)
    with pytest.raises(RuntimeError, match="interrupted"):
        run_recipe(load_recipe(recipe))

    resumed = []

    def counting(*args, **kwargs):
        resumed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(collect, "_collect_chunk", counting)
    result = run_recipe(load_recipe(recipe))
    assert len(resumed) == 2  # the two calib chunks were checkpointed; only the test split ran
    assert result.stage("collect").summary["calib_rows"] == 4
    after_resume = {s: _rows(stage_dir, s) for s in ("calib", "test")}
    for split, rows in after_resume.items():
        assert [r["position"] for r in rows] == [0, 1, 2, 3], split
        assert all(set(FEATURES) <= set(r) and r["correct_contains"] in (0.0, 1.0) for r in rows)
        assert all(len(r["sample_answers"]) == 3 for r in rows)
        assert all(len(r["retrieved_ids"]) == 2 and r["rag_contains"] in (0.0, 1.0) for r in rows)
        assert all(-1.0 <= r["delta_seper_s"] <= 1.0 and r["correct_llm"] in (0.0, 1.0) for r in rows)
        assert all(r["delta_seper_h"] == pytest.approx(r["seper_h"] - r["seper_h_closed"]) for r in rows)
        assert all(r["closed_prompt_tokens"] > 0 and r["rag_prompt_tokens"] > r["closed_prompt_tokens"] for r in rows)
    summary = json.loads((stage_dir / "summary.json").read_text())
    assert set(summary["splits"]["test"]["auroc_correct_contains"]) == set(FEATURES)
    labels = json.loads((stage_dir / "labels.json").read_text())
    assert {"correct_em", "rag_f1", "delta_seper_s", "correct_llm"} <= set(labels)
    assert all(info["requires_gold"] for info in labels.values())
    resumed_costs = _stat_costs(stage_dir)

    run_recipe(load_recipe(recipe), force=["collect"])  # uninterrupted: identical values
    for split in ("calib", "test"):
        _same(after_resume[split], _rows(stage_dir, split))
    assert _counts(_stat_costs(stage_dir)) == _counts(resumed_costs)  # the resumed chunks kept their costs

    def run_shard(i):
        run_recipe(load_recipe(recipe, [f"collect.shard={i}/2"]))
        return stage_dir

    shard_dirs = merge_two_shards(tmp_path, run_shard)
    for split in ("calib", "test"):
        _same(after_resume[split], _rows(tmp_path / "merged", split), rel=1e-5)
    merged = _counts(_stat_costs(tmp_path / "merged"))  # rebuilt from both shards' rows
    for split, counts in _counts(resumed_costs).items():  # per-prompt counts: batching does not move them (DENSE
        # rephrases each distinct chunk once per batch: its counts may)
        same = {key: value for key, value in counts.items() if not key.startswith("dense.")}
        assert {key: merged[split][key] for key in same} == pytest.approx(same), split
    with pytest.raises(Exception, match="two shards"):
        collect.merge_shards([shard_dirs[0], shard_dirs[0]], tmp_path / "bad")
    assert not (tmp_path / "bad").exists()  # nothing half-written
    with pytest.raises(Exception, match="exists already"):
        collect.merge_shards(shard_dirs, tmp_path / "merged")


def test_collect_refuses_bad_settings():
    with pytest.raises(ConfigError, match="unknown"):
        collect.check_features(["confidence", "nope"])
    collect.check_features(["confidence", "lars", "dense"])  # lars is fitted by collect, dense retrieves
    with pytest.raises(ConfigError, match="i/N"):
        collect.parse_shard("2")
    assert collect.parse_shard("1/3") == (1, 3)
