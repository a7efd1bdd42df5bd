"""Saved dataset dicts with empty splits (datasets cannot save or load a zero-row split), and a test-only dataset
through build_data and the answer stage."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest

from workbench.backends.cost import CostCounter
from workbench.data.dataset_store import (
    FINGERPRINT_FILE,
    dataset_dict_fingerprint,
    load_saved_dataset_dict,
    save_dataset_dict,
)
from workbench.data.schema import QA_FEATURES, QAExample, examples_to_dataset
from workbench.recipe import RecipeConfig
from workbench.stages.context import Resources

QUESTIONS = [("q0", "Which city lies on the Seine?", "Paris"), ("q1", "Who wrote Hamlet?", "Shakespeare")]
DOCS = [
    ("paris", "Paris", "Paris is the capital of France, a city on the river Seine."),
    ("hamlet", "Hamlet", "Hamlet is a tragedy written by William Shakespeare."),
]


def two_rows() -> datasets.Dataset:
    """A two-question QA dataset."""
    return examples_to_dataset([QAExample(i, q, [a]) for i, q, a in QUESTIONS])


def test_empty_splits_are_recorded_and_recreated(tmp_path):
    dd = datasets.DatasetDict({"train": examples_to_dataset([]), "calib": two_rows(), "test": two_rows()})
    fingerprint = save_dataset_dict(dd, tmp_path / "qa")
    record = json.loads((tmp_path / "qa" / FINGERPRINT_FILE).read_text())
    assert record["splits"] == {"train": 0, "calib": 2, "test": 2}
    loaded = load_saved_dataset_dict(tmp_path / "qa")
    assert list(loaded) == ["train", "calib", "test"]  # the saved order
    assert loaded["train"].num_rows == 0 and loaded["train"].features == QA_FEATURES
    assert loaded["test"]["id"] == ["q0", "q1"]
    assert dataset_dict_fingerprint(loaded) == fingerprint


def test_a_dict_of_empty_splits_round_trips(tmp_path):
    dd = datasets.DatasetDict({"test": examples_to_dataset([]), "val": examples_to_dataset([])})
    save_dataset_dict(dd, tmp_path / "qa")
    loaded = load_saved_dataset_dict(tmp_path / "qa")
    assert {split: ds.num_rows for split, ds in loaded.items()} == {"test": 0, "val": 0}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    """``rows`` as a JSON-lines file at ``path``."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory) -> Path:
    """A tiny random Llama (answers are noise; the stages only have to run)."""
    from tests.tiny_models import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), seed=1, initializer_range=1.0)


def stage_ctx(config: RecipeConfig, out: Path, inputs: dict[str, Path]) -> SimpleNamespace:
    """What a stage function reads from its context: config, inputs, out_dir, resources, log."""
    out.mkdir(parents=True)
    counter = CostCounter()
    resources = Resources(config, counter)
    log = logging.getLogger("test.dataset_store")
    return SimpleNamespace(config=config, inputs=inputs, out_dir=out, resources=resources, counter=counter, log=log)


def test_a_test_only_file_runs_through_build_data_and_answer(tmp_path, tiny_lm):
    from workbench.stages.answer import run as answer
    from workbench.stages.build_data import run as build_data

    qa_file = write_jsonl(tmp_path / "qa.jsonl", [{"id": i, "question": q, "answers": [a]} for i, q, a in QUESTIONS])
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"doc_id": d, "title": t, "text": x} for d, t, x in DOCS])
    config = RecipeConfig(name="test-only", stages=["build_data", "answer"])
    config.data.dataset, config.data.corpus, config.data.fractions = str(qa_file), str(corpus), [0, 0, 0, 1]
    config.generator.model, config.generator.cache = str(tiny_lm), False
    config.answer.max_new_tokens, config.retrieval.k = 3, 1
    summary = build_data.run(stage_ctx(config, tmp_path / "build_data", {}))
    assert summary["n_test"] == 2 and summary["n_train"] == summary["n_calib"] == summary["n_val"] == 0
    qa = load_saved_dataset_dict(tmp_path / "build_data" / "qa")
    assert {split: ds.num_rows for split, ds in qa.items()} == {"train": 0, "calib": 0, "val": 0, "test": 2}
    answered = answer.run(stage_ctx(config, tmp_path / "answer", {"build_data": tmp_path / "build_data"}))
    assert answered["n_questions"] == 2
