"""The evaluate stage end to end on the tiny models: the baselines (traces, report, CLI, the generation cache) and
every method — DTR, DENSE-RAG, D²-RAG (learned and oracle utility) and InSemRAG too — over a few questions."""

from __future__ import annotations

import json

import pytest

from tests.recipe_overrides import run_overrides
from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration


def _overrides(tmp_path, model, *extra):
    return run_overrides(
        tmp_path,
        model,
        "stages=[build_data,evaluate,report]",
        "evaluate.limit=3",
        "evaluate.max_new_tokens=4",
        "evaluate.methods=[no_rag,standard_rag,oracle]",
        "retrieval.k=2",
        *extra,
        per_template=20,
    )


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


EVERY_METHOD = ("no_rag", "standard_rag", "oracle", "dtr", "dense_rag", "d2rag", "d2rag_oracle", "insemrag")
SMALL_OPTIONS = (
    "evaluate.options={dtr: {pseudo_max_tokens: 8, n_per_path: 2, k: 2}, "
    "dense_rag: {k: 2, candidates: 3, max_iterations: 1, rephrase_max_new_tokens: 8, self_eval_max_new_tokens: 2}, "
    "d2rag: {seper_samples: 2}, d2rag_oracle: {seper_samples: 2}, "
    "insemrag: {k1: 4, candidates_per_channel: 4, k: 2, max_rounds: 2, chunk_tokens: 32, "
    "enrich_tokens: 4, elements_tokens: 4, follow_up_tokens: 4}}"
)


def test_evaluate_runs_every_method_with_tiny_models(tmp_path, tiny_lm_long_dir, tiny_encoder_dir):
    """All eight methods answer the same two questions through the one engine, on a 300-document corpus; D²-RAG's
    learned parts come from the real calibrate / classify stages over a synthetic collection (a random model is
    never right, so a real one would hold one class)."""
    import datasets

    from tests.bundle_run import FEATURES, run_with_synthetic_collect, write_corpus

    corpus = write_corpus(tmp_path / "corpus.jsonl")
    overrides = run_overrides(
        tmp_path,
        tiny_lm_long_dir,
        f"embedder.model={tiny_encoder_dir}",
        f"data.corpus={corpus}",
        "stages=[build_data,collect,calibrate,classify,evaluate,report]",
        "collect.limit=60",
        f"collect.features=[{','.join(FEATURES)}]",
        "classify.seeds=[0]",
        "classify.kinds=[logistic]",  # D²-RAG ships the router (an LR); the MLP would only cost Lightning fits
        "classify.router_trials=20",  # the evaluate recipe's router study, smaller: nothing here reads its front
        "classify.threshold_rule=target_rate",
        "classify.target_rate=0.5",
        "retrieval.k=2",
        "evaluate.limit=2",
        "evaluate.max_new_tokens=4",
        f"evaluate.methods=[{','.join(EVERY_METHOD)}]",
        SMALL_OPTIONS,
        per_template=20,
    )
    run_with_synthetic_collect("evaluate", overrides)
    stage = tmp_path / "run" / "stages" / "evaluate"
    traces = datasets.load_from_disk(str(stage / "traces")).to_list()
    assert [r["method"] for r in traces] == [m for m in EVERY_METHOD for _ in range(2)]
    steps = {
        m: [[s["name"] for s in json.loads(r["trace"])["steps"]] for r in traces if r["method"] == m]
        for m in EVERY_METHOD
    }
    detail = {
        m: [{s["name"]: s["detail"] for s in json.loads(r["trace"])["steps"]} for r in traces if r["method"] == m]
        for m in EVERY_METHOD
    }
    # the random model's answers are empty: DTR's u is +inf, so it retrieves — from its own dense index
    assert steps["dtr"] == [["closed_book", "pseudo_context", "retrieve", "select", "generate"]] * 2
    assert all(d["retrieve"]["retriever"] == "DenseRetriever" for d in detail["dtr"])
    # DENSE-RAG's C₀ comes from its own 512/64 chunks of the retrieved documents
    assert all(s[:2] == ["retrieve", "dense"] and s[-1] == "select_answer" for s in steps["dense_rag"])
    for d in detail["dense_rag"]:
        assert d["retrieve"]["chunking"] == "recursive" and all("#f" in i for i in d["retrieve"]["ids"])
    # D²-RAG decides from its calibrated features; the oracle variant decodes with ΔSePer
    assert all(s[:2] == ["features", "decide"] for s in steps["d2rag"] + steps["d2rag_oracle"])
    # InSemRAG searches its own 32-token windows of the documents; one generator call per question
    for d, s in zip(detail["insemrag"], steps["insemrag"], strict=True):
        assert d["retrieve"]["corpus"]["chunking"] == "fixed" and d["retrieve"]["corpus"]["chunk_tokens"] == 32
        assert s[0] == "elements" and s.count("generate") == 1
    summary = json.loads((stage / "summary.json").read_text())["methods"]
    assert list(summary) == sorted(EVERY_METHOD)
    # LM calls count prompts: closed-book, pseudo-context and final answer for DTR; one answer for the baselines
    assert summary["no_rag"]["lm_calls"] == summary["standard_rag"]["lm_calls"] == 1.0
    assert summary["oracle"]["lm_calls"] == 2.0 and summary["dtr"]["lm_calls"] == 3.0
    # DENSE-RAG: its 2 chunks rephrased (empty: each falls back to its chunk, so every single-edit context is C₀)
    # and the one distinct context answered; all answers agree, DSE = 0: certain, nothing else runs
    assert summary["dense_rag"]["lm_calls"] == 2.0 + 1.0
    assert all(float(r["lm_calls"]).is_integer() for r in traces)
    report = (tmp_path / "report" / "report.md").read_text()
    assert all(f"| {m} |" in report for m in EVERY_METHOD)


def test_evaluate_refuses_unknown_methods_and_options(tmp_path, tiny_lm_long_dir):
    with pytest.raises(ConfigError, match="unknown or no method"):
        run_recipe(load_recipe("evaluate", _overrides(tmp_path, tiny_lm_long_dir, "evaluate.methods=[nope]")))
    with pytest.raises(ConfigError, match="needs the calibrate and classify"):
        run_recipe(load_recipe("evaluate", _overrides(tmp_path, tiny_lm_long_dir, "evaluate.methods=[d2rag]")))
