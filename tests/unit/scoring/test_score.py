"""``workbench score`` (workbench/scoring): parity with ``collect`` on the answers it made, bad records refused in one
line with nothing written, resume and shards, NaN reasons, and a bundle's P(correct) and decisions."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from workbench.backends.capabilities import Capabilities
from workbench.core.errors import DataError, WorkbenchError
from workbench.scoring.records import read_records
from workbench.scoring.run import UNDEFINED, Scorer, ScoreSettings, merge_scores, run_fingerprint, score_file
from workbench.uncertainty.calculators import ANSWER_SYSTEM, StatSettings

pytest.importorskip("torch")

FEATURES = ["confidence", "dtr_nll", "entropy", "mars", "attention_score", "ptrue"]
QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "Where does the Nile flow?", "Is Paris a city?"]
SAMPLES = 3
TOKENS = 8


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    from tests.tiny_models import build_tiny_llama

    return build_tiny_llama(
        tmp_path_factory.mktemp("tiny-peaked"), seed=3, max_positions=4096, tie_embeddings=False, initializer_range=1.0
    )


@pytest.fixture(scope="module")
def generator(lm_dir):
    from workbench.backends.generator import Generator

    return Generator(lm_dir, batch_size=8, seed=5)


@pytest.fixture(scope="module")
def collected(generator, tmp_path_factory):
    """``collect``'s own records (its collect_split, greedy answers and samples) for :data:`QUESTIONS`, with the
    token ids of each answer and sample (the same greedy / seeded decode again)."""
    from workbench.stages.collect.run import collect_split
    from workbench.stages.collect.settings import CollectSection

    section = CollectSection(features=FEATURES, labels=[], samples=SAMPLES, max_new_tokens=TOKENS, batch_questions=4)
    ctx = SimpleNamespace(
        config=SimpleNamespace(collect=section, seed=0),
        counter=generator.counter,
        resources=SimpleNamespace(generator=lambda: generator),
        scratch_dir=tmp_path_factory.mktemp("collect-scratch"),
    )
    rows = [{"id": f"q{i}", "question": q, "answers": ["x"]} for i, q in enumerate(QUESTIONS)]
    tools = {"judge": None, "embedder": None, "passages": None, "llm_judge": None}
    records = collect_split(ctx, "test", rows, tools)
    prompts = [generator.build_prompt(q, None, max_new_tokens=TOKENS, system=ANSWER_SYSTEM).text for q in QUESTIONS]
    greedy = generator.generate(prompts, temperature=0.0, max_new_tokens=TOKENS, stop=("\n",))
    sampled = generator.generate(prompts, temperature=0.7, n=SAMPLES, seed=None, max_new_tokens=TOKENS, stop=("\n",))
    for i, (record, answer) in enumerate(zip(records, greedy, strict=True)):
        assert answer.text.strip() == record["greedy_answer"]
        record["token_ids"] = [int(t) for t in answer.token_ids]
        group = sampled[i * SAMPLES : (i + 1) * SAMPLES]
        assert [s.text.strip() for s in group] == record["sample_answers"]
        record["samples"] = [
            {"text": s.text, "token_ids": [int(t) for t in s.token_ids], "eos": s.finish_reason == "eos"} for s in group
        ]
    return records


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _records_file(collected, path: Path, **extra) -> Path:
    rows = [
        {
            "id": r["id"],
            "question": r["question"],
            "answer": r["greedy_answer"],
            "eos": len(r["greedy_logprobs"]) != r["closed_new_tokens"],
            "token_ids": r["token_ids"],
            "samples": r["samples"],
            **extra,
        }
        for r in collected
    ]
    return _write(path, rows)


def _score(path: Path, out: Path, generator, features=FEATURES, batch=8, shard="0/1", scorer=None) -> dict:
    settings = ScoreSettings(tuple(features), StatSettings(samples=SAMPLES, max_new_tokens=TOKENS), batch, shard)
    return score_file(
        read_records(path), out, settings, scorer or Scorer(generator), run_fingerprint(path, settings, "tiny", None)
    )


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]


def test_score_on_collects_answers_gives_collects_feature_values(collected, generator, tmp_path):
    path = _records_file(collected, tmp_path / "answers.jsonl")
    summary = _score(path, tmp_path / "out", generator)
    rows = _rows(tmp_path / "out")
    assert [r["id"] for r in rows] == [r["id"] for r in collected] and summary["rows"] == len(QUESTIONS)
    for row, record in zip(rows, collected, strict=True):
        assert row["reasons"] == {}
        for name in FEATURES:  # token-level ones teacher-forced, entropy from the given samples
            assert row["features"][name] == pytest.approx(record[name], rel=1e-4, abs=1e-4), name


def test_given_logprobs_are_used_as_they_are(collected, generator, tmp_path):
    rows = [
        {"id": r["id"], "question": r["question"], "answer": r["greedy_answer"], "logprobs": [-0.5] * 3}
        for r in collected
    ]
    _score(_write(tmp_path / "given.jsonl", rows), tmp_path / "out", generator, features=["confidence", "token_sar"])
    for row in _rows(tmp_path / "out"):
        assert row["features"]["confidence"] == pytest.approx(-0.5)
        # token_sar pairs tokens with log-probs: NaN with the reason when the given ones cover other tokens
        assert row["features"]["token_sar"] is None and "given log-probs cover 3 tokens" in row["reasons"]["token_sar"]


def test_a_served_model_without_echo_says_why_token_features_are_nan(collected, generator, tmp_path):
    class NoEcho:
        capabilities = Capabilities(logprobs=True)

        def __getattr__(self, name):
            return getattr(generator, name)

    path = _records_file(collected, tmp_path / "answers.jsonl")
    _score(path, tmp_path / "out", generator, features=["confidence", "ptrue"], scorer=Scorer(NoEcho()))
    for row in _rows(tmp_path / "out"):
        assert row["features"]["confidence"] is None and row["features"]["ptrue"] is not None
        assert "gives no prompt log-probabilities (echo)" in row["reasons"]["confidence"]


def test_a_nan_feature_gets_the_reason_of_its_missing_stat_else_undefined():
    from workbench.scoring.run import nan_reasons

    reasons = nan_reasons({"dense": float("nan"), "confidence": 1.0}, {"dense_answers": "needs contexts"})
    assert reasons == {"dense": "needs contexts"}
    assert nan_reasons({"confidence": float("nan")}, {}) == {"confidence": UNDEFINED}


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"question": "q", "answer": "a"}, "missing field 'id'"),
        ({"id": "x", "answer": "a"}, "missing field 'question'"),
        ({"id": "x", "question": "q", "answer": 3}, "field 'answer' must be a string"),
        ({"id": "x", "question": "q", "answer": "a", "logprobs": [0.5]}, "field 'logprobs'"),
        ({"id": "x", "question": "q", "answer": "a", "eos": "yes"}, "field 'eos'"),
        ({"id": "x", "question": "q", "answer": "a", "contexts": "p"}, "field 'contexts'"),
        ({"id": "x", "question": "q", "answer": "a", "samples": [1]}, "field 'samples[0]'"),
        ({"id": "a", "question": "q", "answer": "a"}, "field 'id' repeats the id of row 1"),
    ],
)
def test_a_bad_record_is_one_line_naming_file_row_and_field_and_nothing_is_written(
    tmp_path, monkeypatch, capsys, row, field
):
    from workbench.cli import main

    path = _write(tmp_path / "bad.jsonl", [{"id": "a", "question": "q", "answer": "a"}, row])
    monkeypatch.setattr(sys, "argv", ["workbench", "score", str(path), "--out", str(tmp_path / "out"), "--model", "x"])
    with pytest.raises(SystemExit) as exited:
        main()
    message = capsys.readouterr().err.strip()
    assert exited.value.code == 2
    assert "\n" not in message and f"{path}: row 2" in message and field in message and "docs/score.md" in message
    assert not (tmp_path / "out").exists()


def test_parquet_and_hf_dataset_records_are_read(tmp_path):
    import datasets

    rows = [{"id": 1, "question": "q", "answer": "a"}, {"id": 2, "question": "r", "answer": ""}]
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "r.parquet"))
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "hf"))
    for path in (tmp_path / "r.parquet", tmp_path / "hf"):
        assert [(r.id, r.answer.text) for r in read_records(path)] == [("1", "a"), ("2", "")]
    duplicate = [{"id": "1", "question": "q", "answer": "a"}, {"id": "1", "question": "q", "answer": "b"}]
    datasets.Dataset.from_list(duplicate).save_to_disk(str(tmp_path / "dup"))
    with pytest.raises(DataError, match="row 2"):
        read_records(tmp_path / "dup")


def test_resume_skips_finished_chunks_and_shards_merge_into_the_whole(collected, generator, tmp_path, monkeypatch):
    path = _records_file(collected, tmp_path / "answers.jsonl")
    whole = tmp_path / "whole"
    _score(path, whole, generator, features=["confidence", "dtr_nll"], batch=2)
    assert len(list((whole / "chunks").glob("chunk-*.jsonl"))) == 2
    (whole / "chunks" / "chunk-0000002.jsonl").unlink()  # an interrupted run: one chunk left to do
    import workbench.scoring.run as run

    calls = []
    real = run.score_chunk
    monkeypatch.setattr(run, "score_chunk", lambda records, *a: calls.append(len(records)) or real(records, *a))
    _score(path, whole, generator, features=["confidence", "dtr_nll"], batch=2)
    assert calls == [2]
    with pytest.raises(DataError, match="another input or other settings"):
        _score(path, whole, generator, features=["confidence"], batch=2)
    for i in range(2):
        _score(path, tmp_path / f"shard{i}", generator, features=["confidence", "dtr_nll"], batch=2, shard=f"{i}/2")
    merge_scores([tmp_path / "shard0", tmp_path / "shard1"], tmp_path / "merged")
    merged, alone = _rows(tmp_path / "merged"), _rows(whole)
    assert [(r["id"], r["position"]) for r in merged] == [(r["id"], r["position"]) for r in alone]
    for a, b in zip(merged, alone, strict=True):  # other batches pad differently: float32 noise only
        assert a["features"] == pytest.approx(b["features"], rel=1e-5)
    with pytest.raises(DataError, match="two shards"):
        merge_scores([tmp_path / "shard0", tmp_path / "shard0"], tmp_path / "again")


def _bundle_with(tmp_path: Path, methods: dict[str, dict], adapter: Path | None = None) -> Path:
    """A copy of the fixture bundle that ships ``methods`` (name → options) too, and the distilled controller
    ``adapter`` (its directory) as an export ships it, its manifest digest re-made."""
    import hashlib

    from workbench.backends.lora import copy_adapter
    from workbench.bundle.manifest import content_digest

    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "bundles" / "tiny" / "1.0.0"
    root = Path(shutil.copytree(fixture, tmp_path / "tiny" / "1.0.0"))
    manifest = json.loads((root / "manifest.json").read_text())
    for name, options in methods.items():
        manifest["methods"][name] = {"options": options, "requires_gold": False}
    if adapter is not None:
        for path in copy_adapter(adapter, root / "learned"):
            data = path.read_bytes()
            entry = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            manifest["files"][path.relative_to(root).as_posix()] = entry
        manifest["controller_adapter"] = {"file": "learned/adapter.json", "kind": "lora_adapter"}
    manifest["content_sha256"] = content_digest(manifest, manifest["files"])
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def _overrides(generator: Path, embedder: Path, corpus: Path) -> dict:
    """Runtime overrides that run the fixture bundle on these tiny models and corpus."""
    return {
        "generator": str(generator),
        "embedder": str(embedder),
        "allow_model_mismatch": True,
        "corpus": str(corpus),
        "allow_corpus_mismatch": True,
    }


def _bundle_with_dtr(tmp_path: Path, tau: float) -> Path:
    """A copy of the fixture bundle that ships DTR too (τ = ``tau``)."""
    return _bundle_with(tmp_path, {"dtr": {"tau": tau}})


def test_a_bundle_adds_p_correct_and_decisions_from_its_own_policy_and_rules(
    tmp_path, tiny_lm_long_dir, tiny_encoder_dir
):
    from tests.bundle_run import write_corpus
    from workbench.methods.dtr import decide as dtr_decide
    from workbench.runtime import load_bundle
    from workbench.scoring.decisions import NOT_FROM_FEATURES, bundle_decider, decision_stats

    overrides = _overrides(tiny_lm_long_dir, tiny_encoder_dir, write_corpus(tmp_path / "corpus.jsonl", n=20))
    runtime = load_bundle(_bundle_with_dtr(tmp_path, tau=1.0), overrides)
    assert decision_stats(runtime) == {"greedy_logprobs", "greedy_eos"}
    decide = bundle_decider(runtime)
    values = {"confidence": -0.4, "entropy": -0.8, "dtr_nll": -0.4}
    confident = {"greedy_logprobs": [-0.2, -0.4], "greedy_eos": False}  # u = 0.3 < τ
    made = decide(values, confident)
    expected = runtime.decide(values)
    assert made["p_correct"] == pytest.approx(expected.p_correct)
    assert made["decisions"]["d2rag"] == {"retrieve": bool(expected.retrieve), "tau": runtime.policy.tau, "imputed": []}
    assert made["decisions"]["no_rag"] == {"retrieve": False, "fixed": True}  # the baselines' fixed decisions
    assert made["decisions"]["standard_rag"] == {"retrieve": True, "fixed": True}
    assert NOT_FROM_FEATURES not in json.dumps(made)
    assert made["decisions"]["dtr"] == {"retrieve": False, "score": pytest.approx(0.3), "tau": 1.0}
    unsure = decide(values, {"greedy_logprobs": [-2.0, -1.0], "greedy_eos": False})["decisions"]["dtr"]
    assert unsure["retrieve"] is True and unsure["retrieve"] == bool(dtr_decide(1.5, 1.0))
    with_nan = decide({**values, "entropy": float("nan")}, confident)
    assert with_nan["decisions"]["d2rag"]["imputed"] == ["entropy"] and np.isfinite(with_nan["p_correct"])


def test_workbench_score_with_a_bundle_writes_features_p_correct_and_decisions(
    tmp_path, monkeypatch, capsys, tiny_lm_long_dir, tiny_encoder_dir
):
    from tests.bundle_run import write_corpus
    from workbench.cli import main
    from workbench.runtime import load_bundle

    root = _bundle_with(tmp_path, {"dtr": {"tau": 0.5}, "insemrag": {"controller": "heuristic", "chunking": "corpus"}})
    corpus = write_corpus(tmp_path / "corpus.jsonl", n=20)
    sets = [f"generator={tiny_lm_long_dir}", f"embedder={tiny_encoder_dir}", "allow_model_mismatch=true"]
    sets += [f"corpus={corpus}", "allow_corpus_mismatch=true"]
    rows = [
        {"id": 7, "question": "Who wrote Hamlet?", "answer": "Shakespeare"},
        {"id": 8, "question": "Q?", "answer": ""},
    ]
    path = _write(tmp_path / "log.jsonl", rows)
    args = ["workbench", "score", str(path), "--out", str(tmp_path / "out"), "--bundle", str(root)]
    monkeypatch.setattr(sys, "argv", [*args, *(part for s in sets for part in ("--set", s))])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code in (0, None)
    assert "2 records scored" in capsys.readouterr().out
    scored = _rows(tmp_path / "out")
    runtime = load_bundle(root, _overrides(tiny_lm_long_dir, tiny_encoder_dir, corpus))
    assert [r["id"] for r in scored] == ["7", "8"]
    assert set(scored[0]["features"]) == set(runtime.policy.features)
    for row in scored:  # P(correct) is the bundle's own policy on the scored features
        assert row["p_correct"] == pytest.approx(runtime.decide(row["features"]).p_correct)
        assert row["decisions"]["d2rag"]["retrieve"] == (row["p_correct"] < runtime.policy.tau)
        dtr = row["decisions"]["dtr"]  # DTR's own rule on u = -dtr_nll, with the bundle's τ
        assert dtr["score"] == pytest.approx(-row["features"]["dtr_nll"]) and dtr["retrieve"] == (dtr["score"] >= 0.5)
        assert row["decisions"]["no_rag"] == {"retrieve": False, "fixed": True}
        insem = row["decisions"]["insemrag"]  # decided from the record's question by the runtime's InSemRAG
        assert insem["retrieve"] is True and insem["views"]["dense"] == row["question"]
    assert scored[1]["features"]["confidence"] is None and scored[1]["reasons"]["confidence"]  # an empty answer
    assert json.loads((tmp_path / "out" / "score.json").read_text())["generator"] == "tiny 1.0.0"


def test_a_served_model_with_echo_scores_as_in_process(lm_dir, generator, tmp_path):
    from workbench.backends.factory import build_served_generator
    from workbench.serve.openai_server import start_in_thread

    rows = [
        {"id": "a", "question": QUESTIONS[0], "answer": "Paris"},
        {"id": "b", "question": QUESTIONS[1], "answer": "William Shakespeare", "eos": True},
    ]
    path = _write(tmp_path / "text.jsonl", rows)
    features = ["confidence", "dtr_nll", "mars"]
    _score(path, tmp_path / "local", generator, features=features)
    with start_in_thread(str(lm_dir), served_name="tiny", max_logprobs=1000, batch_size=4) as server:
        served = build_served_generator(
            base_url=server.base_url, model="tiny", tokenizer=str(lm_dir), top_logprobs=5, batch_size=4, cache=False
        )
        try:
            assert served.capabilities.echo
            _score(path, tmp_path / "served", generator, features=features, scorer=Scorer(served))
        finally:
            served.close()
    for a, b in zip(_rows(tmp_path / "local"), _rows(tmp_path / "served"), strict=True):
        assert b["reasons"] == {} and b["features"] == pytest.approx(a["features"], abs=1e-5)


@pytest.mark.parametrize(
    ("shard", "batch", "features", "where"),
    [
        ("2", 8, ("confidence",), "--shard"),
        ("2/2", 8, ("confidence",), "--shard"),
        ("0/1", 0, ("confidence",), "--batch"),
        ("0/1", 8, (), "--features"),
    ],
)
def test_bad_settings_are_refused_naming_the_option(shard, batch, features, where):
    from workbench.core.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        ScoreSettings(features, StatSettings(), batch, shard).check()
    assert refused.value.where == where


def test_workbench_score_with_a_local_model(lm_dir, tmp_path, monkeypatch, capsys):
    from workbench.cli import main

    path = _write(tmp_path / "log.jsonl", [{"id": "a", "question": "Who wrote Hamlet?", "answer": "Shakespeare"}])
    base = ["workbench", "score", str(path), "--model", str(lm_dir)]
    monkeypatch.setattr(sys, "argv", [*base, "--out", str(tmp_path / "nli"), "--features", "semantic_entropy"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2 and "needs --embedder" in capsys.readouterr().err
    assert not (tmp_path / "nli").exists()
    monkeypatch.setattr(sys, "argv", [*base, "--out", str(tmp_path / "out"), "--features", "confidence,dtr_nll"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code in (0, None) and "1 records scored" in capsys.readouterr().out
    (row,) = _rows(tmp_path / "out")
    assert row["id"] == "a" and row["features"]["confidence"] == pytest.approx(row["features"]["dtr_nll"])
    assert row["features"]["confidence"] < 0 and "p_correct" not in row


def _split_ids(generator, text: str) -> list[int]:
    """A tokenisation of ``text`` that is not the tokenizer's own: each character encoded alone."""
    return [int(t) for c in text for t in generator.tokenizer(c, add_special_tokens=False)["input_ids"]]


def test_given_token_ids_are_sent_to_a_served_model_as_the_prompt(lm_dir, generator, tmp_path):
    from workbench.backends.factory import build_served_generator
    from workbench.serve.openai_server import start_in_thread

    answers = ["Paris", "William Shakespeare"]
    ids = [_split_ids(generator, a) for a in answers]
    own = [[int(t) for t in generator.tokenizer(a, add_special_tokens=False)["input_ids"]] for a in answers]
    assert all(a != b for a, b in zip(ids, own, strict=True))  # the tokenizer would score other tokens
    rows = [
        {"id": str(i), "question": QUESTIONS[i], "answer": a, "token_ids": t, "eos": i == 1}
        for i, (a, t) in enumerate(zip(answers, ids, strict=True))
    ]
    path = _write(tmp_path / "ids.jsonl", rows)
    features = ["confidence", "dtr_nll", "mars"]
    _score(path, tmp_path / "local", generator, features=features)
    _score(
        _write(tmp_path / "text.jsonl", [{k: v for k, v in r.items() if k != "token_ids"} for r in rows]),
        tmp_path / "text",
        generator,
        features=features,
    )
    with start_in_thread(str(lm_dir), served_name="tiny", max_logprobs=1000, batch_size=4) as server:
        served = build_served_generator(
            base_url=server.base_url, model="tiny", tokenizer=str(lm_dir), top_logprobs=5, batch_size=4, cache=False
        )
        try:
            _score(path, tmp_path / "served", generator, features=features, scorer=Scorer(served))
        finally:
            served.close()
    local, text, remote = _rows(tmp_path / "local"), _rows(tmp_path / "text"), _rows(tmp_path / "served")
    for a, b, c in zip(local, remote, text, strict=True):
        assert b["reasons"] == {} and b["features"] == pytest.approx(a["features"], abs=1e-4)
        assert c["features"]["confidence"] != pytest.approx(a["features"]["confidence"], abs=1e-4)  # ids mattered


def test_workbench_score_on_a_served_model_without_a_bundle(lm_dir, generator, tmp_path, monkeypatch, capsys):
    from workbench.cli import main
    from workbench.serve.openai_server import start_in_thread

    rows = [
        {"id": "a", "question": QUESTIONS[0], "answer": "Paris"},
        {"id": "b", "question": QUESTIONS[1], "answer": "Shakespeare"},
    ]
    path = _write(tmp_path / "log.jsonl", rows)
    features = "confidence,dtr_nll,entropy"
    _score(path, tmp_path / "local", generator, features=["confidence", "dtr_nll"])
    with start_in_thread(str(lm_dir), served_name="tiny", max_logprobs=1000, batch_size=4) as server:
        args = ["workbench", "score", str(path), "--out", str(tmp_path / "out"), "--base-url", server.base_url]
        args += ["--model", "tiny", "--tokenizer", str(lm_dir), "--features", features, "--samples", "2"]
        monkeypatch.setattr(sys, "argv", args)
        with pytest.raises(SystemExit) as exited:
            main()
    assert exited.value.code in (0, None) and "2 records scored" in capsys.readouterr().out
    for row, local in zip(_rows(tmp_path / "out"), _rows(tmp_path / "local"), strict=True):
        assert "p_correct" not in row and row["reasons"] == {}
        for name in ("confidence", "dtr_nll"):  # echo teacher-forces the answer as in process
            assert row["features"][name] == pytest.approx(local["features"][name], abs=1e-4)
        assert np.isfinite(row["features"]["entropy"])  # from samples generated by the server
    summary = json.loads((tmp_path / "out" / "score.json").read_text())
    assert summary["generator"] == f"tiny at {server.base_url}" and summary["stats"]["samples"] == 2


def _adapter(lm_dir: Path, out: Path) -> Path:
    """A LoRA adapter over ``lm_dir`` as ``distill`` writes one (the distilled InSemRAG controller's)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from workbench.assets import resolve_generator
    from workbench.backends.lora import save_lora_adapter

    torch.manual_seed(0)
    config = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(lm_dir), config)
    settings = {"r": 2, "alpha": 4, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
    fingerprint = resolve_generator(str(lm_dir)).fingerprint
    save_lora_adapter(
        peft_model, out, base_model=str(lm_dir), base_fingerprint=fingerprint, settings=settings, decisions=["refine"]
    )
    return out


def test_record_decisions_of_dense_rag_insemrag_and_the_baselines_equal_the_runtimes_own(
    tmp_path, lm_dir, tiny_encoder_dir
):
    from tests.bundle_run import write_corpus
    from workbench.runtime import load_bundle
    from workbench.scoring.decisions import bundle_decider
    from workbench.scoring.records import GivenText, ScoreRecord

    small = {"chunking": "corpus", "max_rounds": 1, "k1": 4, "k": 2}
    methods = {
        "dense_rag": {"chunking": "corpus", "k": 2, "refine": False, "rephrase_max_new_tokens": 8, "theta": 0.3},
        "insemrag": {"controller": "heuristic", **small},
        "insemrag_distilled": {**small, "refine": False, "repair": False},  # its controller: the bundle's adapter
    }
    overrides = _overrides(lm_dir, tiny_encoder_dir, write_corpus(tmp_path / "corpus.jsonl", n=20))
    root = _bundle_with(tmp_path, methods, adapter=_adapter(lm_dir, tmp_path / "adapter"))
    runtime = load_bundle(root, overrides)
    decide = bundle_decider(runtime)
    values = {"confidence": -0.4, "entropy": -0.8, "dtr_nll": -0.4}
    refined = []
    for question in ("Who wrote Hamlet?", "Which river flows through Paris?"):
        dense = {s["name"]: s["detail"] for s in runtime.answer(question, "dense_rag").trace["steps"]}["dense"]
        baselines = {m: runtime.answer(question, m).retrieved for m in ("no_rag", "standard_rag")}
        record = ScoreRecord(0, "x", question, GivenText("an answer"), tuple(dense["contexts"]))
        made = decide(values, {}, record)["decisions"]
        # DENSE-RAG: its own triage of the logged contexts, as its answer made it
        assert made["dense_rag"] == {
            "retrieve": True,
            "refine": not dense["certain"],
            "score": pytest.approx(dense["dse"], abs=1e-6),
            "theta": 0.3,
        }
        refined.append(made["dense_rag"]["refine"])
        for name, retrieved in baselines.items():  # the fixed decisions are what the runtime does
            assert made[name]["retrieve"] == retrieved
        # without contexts DENSE-RAG cannot triage
        bare = decide(values, {}, ScoreRecord(0, "x", question, GivenText("a")))["decisions"]
        assert bare["dense_rag"] == {"retrieve": None, "reason": "needs the record's 'contexts'"}
        empty = decide(values, {}, ScoreRecord(0, "x", question, GivenText("a"), ()))["decisions"]["dense_rag"]
        assert empty["retrieve"] is None and "'contexts' is empty" in empty["reason"]
    assert sorted(refined) == [False, True]  # one context DENSE calls certain, one it would refine
    # InSemRAG: the controller's decisions on the question, as its answer's first steps made them
    question = "Who wrote Hamlet?"
    made = decide(values, {}, ScoreRecord(0, "x", question, GivenText("a")))["decisions"]
    for method, controller in (("insemrag", "heuristic"), ("insemrag_distilled", "distilled")):
        steps = runtime.answer(question, method).trace["steps"]
        first = {n: next(s["detail"] for s in steps if s["name"] == n) for n in ("elements", "enrich", "weights")}
        insem = made[method]
        assert insem["retrieve"] is True and insem["controller"] == controller
        assert insem["elements"] == (list(first["elements"]["decision"]["elements"]) or [question])
        assert insem["views"] == first["enrich"]["views"] and insem["weights"] == first["weights"]["weights"]


def test_a_distilled_insemrag_without_its_adapter_decides_nothing_and_says_why(
    tmp_path, tiny_lm_long_dir, tiny_encoder_dir
):
    from tests.bundle_run import write_corpus
    from workbench.runtime import load_bundle
    from workbench.scoring.decisions import NO_RECORD, bundle_decider
    from workbench.scoring.records import GivenText, ScoreRecord

    overrides = _overrides(tiny_lm_long_dir, tiny_encoder_dir, write_corpus(tmp_path / "corpus.jsonl", n=20))
    runtime = load_bundle(_bundle_with(tmp_path, {"insemrag_distilled": {"chunking": "corpus"}}), overrides)
    values = {"confidence": -0.4, "entropy": -0.8, "dtr_nll": -0.4}
    made = bundle_decider(runtime)(values, {}, ScoreRecord(0, "x", "Who wrote Hamlet?", GivenText("a")))
    distilled = made["decisions"]["insemrag_distilled"]
    assert distilled["retrieve"] is None and "cannot build it here" in distilled["reason"]
    assert "distilled controller needs controller_model" in distilled["reason"]
    assert bundle_decider(runtime)(values, {})["decisions"]["insemrag_distilled"]["reason"] == NO_RECORD
    # a caller names the methods it needs: only theirs are decided (the others' may cost an LM call per record)
    only = bundle_decider(runtime, ["d2rag", "no_rag"])(values, {})
    assert list(only["decisions"]) == ["d2rag", "no_rag"] and only["p_correct"] is not None
    with pytest.raises(WorkbenchError, match="ships no"):
        bundle_decider(runtime, ["flare"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--tokenizer", "t"], "--tokenizer and --api-key-env apply to a served model"),
        (["--served-model", "m"], "--set, --served-model and --methods apply to a bundle"),
        (["--methods", "d2rag"], "--set, --served-model and --methods apply to a bundle"),
    ],
)
def test_served_options_without_their_server_or_bundle_are_refused_in_one_line(
    tmp_path, monkeypatch, capsys, extra, message
):
    from workbench.cli import main

    path = _write(tmp_path / "log.jsonl", [{"id": "a", "question": "q", "answer": "a"}])
    args = ["workbench", "score", str(path), "--out", str(tmp_path / "out"), "--model", "x", "--features", "confidence"]
    monkeypatch.setattr(sys, "argv", [*args, *extra])
    with pytest.raises(SystemExit) as exited:
        main()
    error = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and "\n" not in error and message in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("capabilities", "tokenizer", "reason"),
    [
        (Capabilities(logprobs=True), object(), "no prompt log-probabilities (echo)"),
        (Capabilities(logprobs=True, echo=True), object(), "takes no token-id prompts"),
        (Capabilities(logprobs=True, echo=True, token_prompts=True), None, "no local tokenizer"),
        (Capabilities(logprobs=True, echo=True, token_prompts=True), object(), None),
    ],
)
def test_a_served_model_teacher_forces_only_with_echo_token_prompts_and_a_tokenizer(capabilities, tokenizer, reason):
    from workbench.scoring.given import can_teacher_force

    said = can_teacher_force(SimpleNamespace(capabilities=capabilities, tokenizer=tokenizer))
    assert said is None if reason is None else reason in said


def test_dtrs_decision_on_its_own_closed_book_answers_equals_the_runtimes(tmp_path, lm_dir, tiny_encoder_dir):
    from tests.bundle_run import write_corpus
    from workbench.methods.common import generate_answers
    from workbench.runtime import load_bundle
    from workbench.scoring.bundle import bundle_scorer

    overrides = _overrides(lm_dir, tiny_encoder_dir, write_corpus(tmp_path / "corpus.jsonl", n=20))
    runtime = load_bundle(_bundle_with(tmp_path, {"dtr": {"tau": 0.4}}), overrides)
    rows, steps = [], []
    for i, question in enumerate(QUESTIONS[:3]):
        step = next(s["detail"] for s in runtime.answer(question, "dtr").trace["steps"] if s["name"] == "closed_book")
        # the log's token ids: the same greedy call DTR's closed-book step makes
        (made,) = generate_answers(runtime.tools(), [question], [None])
        assert made.text.strip() == step["answer"]
        ids = [int(t) for t in made.token_ids]
        rows.append({"id": i, "question": question, "answer": step["answer"], "token_ids": ids, "eos": False})
        steps.append(step)
    path = _write(tmp_path / "log.jsonl", rows)
    scorer, settings, ref = bundle_scorer(runtime, (), 8, "0/1")
    score_file(read_records(path), tmp_path / "out", settings, scorer, run_fingerprint(path, settings, ref, None))
    decided = [row["decisions"]["dtr"] for row in _rows(tmp_path / "out")]
    for dtr, step in zip(decided, steps, strict=True):
        assert step["finish_reason"] != "eos" and not step["include_eos"]
        assert dtr["retrieve"] == step["retrieve"] and dtr["score"] == pytest.approx(step["nll"], abs=1e-4)
    assert {d["retrieve"] for d in decided} == {False, True}  # τ = 0.4 splits them: both decisions are checked
