"""An answer-reader adapter records the data it was trained on, and a recipe whose data configuration would put its
training articles outside ``train`` is refused at load (issue 27 item 1); ``tune_reader`` never scores on its own
training split (issue 27 item 7)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe

EMBEDDED_CONFIG = {"seed": 0, "fractions": [0.5, 0.2, 0.1, 0.2], "ood_topics": ["Arts"]}


def refused(recipe: str, *overrides: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_recipe(recipe, list(overrides))
    assert "\n" not in str(info.value)
    return info.value


def reader_adapter(path, *, base_model="smollm2", record=None, **config):
    """A reader adapter's JSON (no tensors: the load check reads the JSON only) with the record of ``config``."""
    from workbench.data.article_splits import training_data_record

    payload = {"kind": "lora_adapter", "version": 1, "format": "answer-reader-v1", "base_model": base_model}
    if record is None and config:
        record = training_data_record(dataset="wiki-qa", split="train", **config)
    if record is not None:
        payload["training_data"] = record
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))
    return path


# --------------------------------------------------------------------------------------------- the embedded reader


def test_the_embedded_reader_records_the_data_the_tune_reader_recipe_trains_on():
    from workbench.assets import embedded_adapter_path
    from workbench.data.article_splits import training_data_record
    from workbench.stages.tune_reader.run import training_data

    payload = json.loads(embedded_adapter_path("smollm2-reader").read_text())
    record = payload["training_data"]
    assert {k: record[k] for k in EMBEDDED_CONFIG} == EMBEDDED_CONFIG
    assert (record["dataset"], record["split"], record["articles"]) == ("wiki-qa", "train", 4682)
    assert record == training_data_record(dataset="wiki-qa", split="train", **EMBEDDED_CONFIG)
    # the recipe that made it (docs/task.md) trains on exactly that configuration's train split
    assert training_data(load_recipe("tune-reader").config, "train") == record
    # the tensors it names are the committed ones
    from workbench.backends.lora import read_adapter

    _, tensors = read_adapter(embedded_adapter_path("smollm2-reader"))
    assert tensors


def test_quickstart_validates_as_is():
    config = load_recipe("quickstart").config
    assert config.generator.model == "smollm2-reader" and "build_data" in config.stages


@pytest.mark.parametrize(
    ("override", "key", "moved"),
    [
        ("seed=1", "command line: seed", "2,337 of its 4,682 training articles outside train"),
        ("data.fractions=[0.4,0.3,0.1,0.2]", "command line: data.fractions", "936 of its 4,682"),
        ("data.ood_topics=[Arts,People]", "command line: data.ood_topics", "(931 in ood"),
        ("data.ood_topics=[]", "command line: data.ood_topics", "outside train"),
    ],
)
def test_another_data_configuration_is_refused_with_the_way_out(override, key, moved):
    error = refused("quickstart", override)
    assert str(error.where).startswith(key)
    assert "reader adapter smollm2-reader was trained on the train articles of wiki-qa" in error.what
    assert moved in error.what
    assert "generator.model=smollm2 (no adapter)" in error.what and "workbench run tune-reader" in error.what


def test_the_command_refuses_seed_1_in_one_line():
    out = subprocess.run(
        [sys.executable, "-m", "workbench", "validate", "quickstart", "seed=1"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert out.returncode != 0
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "smollm2-reader" in lines[0] and "outside train" in lines[0], out.stderr


@pytest.mark.parametrize(
    "overrides",
    [
        ["data.fractions=[0.6,0.1,0.1,0.2]"],  # a larger train fraction keeps every training article in train
        ["data.ood_topics=[Arts,Nonexistent topic]"],  # no article moves
        ["seed=1", "generator.model=smollm2"],  # the base model learnt no article
        ["seed=1", "stages=[bench_runtime]"],  # no questions are built
        ["seed=1", "data.dataset=x.jsonl", "stages=[build_data,answer]"],  # another dataset
    ],
)
def test_configurations_that_keep_the_training_articles_in_train_load(overrides):
    load_recipe("quickstart", overrides)


# --------------------------------------------------------------------------------------------- any reader adapter


def test_an_adapter_path_or_directory_is_checked_against_its_own_record(tmp_path):
    file = reader_adapter(tmp_path / "reader" / "adapter.json", seed=3, fractions=[0.5, 0.2, 0.1, 0.2], ood_topics=[])
    for ref in (file, file.parent):
        load_recipe("quickstart", [f"generator.model={ref}", "seed=3", "data.ood_topics=[]"])
        error = refused("quickstart", f"generator.model={ref}", "data.ood_topics=[]")  # seed 0
        assert str(error.where).endswith(": seed")  # the recipe's seed 0
        assert f"reader adapter {file} was trained on" in error.what and "seed 3" in error.what


def test_the_adapter_a_reader_was_tuned_from_is_checked_too(tmp_path):
    base = reader_adapter(tmp_path / "base" / "adapter.json", seed=3, fractions=[0.5, 0.2, 0.1, 0.2], ood_topics=[])
    top = reader_adapter(tmp_path / "top" / "adapter.json", base_model=str(base), **EMBEDDED_CONFIG)
    error = refused("quickstart", f"generator.model={top}")
    assert f"reader adapter {base} was trained on" in error.what


def test_a_record_the_installed_summaries_cannot_rebuild_is_refused(tmp_path):
    from workbench.data.article_splits import training_data_record

    record = training_data_record(dataset="wiki-qa", split="train", **EMBEDDED_CONFIG)
    record["articles_sha256"] = "0" * 64
    file = reader_adapter(tmp_path / "adapter.json", record=record)
    error = refused("quickstart", f"generator.model={file}")
    assert error.where.endswith("generator.model") and "cannot be rebuilt" in error.what


def test_a_malformed_record_is_a_one_line_error(tmp_path):
    file = reader_adapter(tmp_path / "adapter.json", record={"dataset": "wiki-qa", "split": "train"})
    error = refused("quickstart", f"generator.model={file}")
    assert "training_data.seed is missing or malformed" in error.what


def test_an_adapter_without_a_record_loads_with_a_warning(tmp_path, caplog):
    file = reader_adapter(tmp_path / "old" / "adapter.json")
    with caplog.at_level(logging.WARNING, logger="workbench.stages.tune_reader.run"):
        load_recipe("quickstart", [f"generator.model={file}", "seed=1"])
    assert any("records no training data" in r.getMessage() and str(file) in r.getMessage() for r in caplog.records)


def test_a_controller_adapter_is_not_a_reader(tmp_path):
    file = tmp_path / "adapter.json"
    file.write_text(json.dumps({"kind": "lora_adapter", "version": 1, "format": "insemrag-controller-v1"}))
    load_recipe("quickstart", [f"generator.model={file}", "seed=1"])


def test_a_row_split_dataset_needs_the_same_seed_and_at_least_the_train_fraction():
    from workbench.data.article_splits import training_data_leak, training_data_record

    record = training_data_record(
        dataset="x.jsonl", split="train", seed=2, fractions=[0.5, 0.2, 0.1, 0.2], ood_topics=[]
    )
    assert set(record) == {"dataset", "split", "seed", "fractions"}
    same = {"dataset": "x.jsonl", "ood_topics": []}
    assert training_data_leak(record, seed=2, fractions=[0.5, 0.2, 0.1, 0.2], **same) is None
    assert training_data_leak(record, seed=2, fractions=[0.7, 0.1, 0.1, 0.1], **same) is None
    assert "another seed" in training_data_leak(record, seed=3, fractions=[0.5, 0.2, 0.1, 0.2], **same)
    assert "smaller train fraction" in training_data_leak(record, seed=2, fractions=[0.4, 0.3, 0.1, 0.2], **same)
    assert training_data_leak(record, dataset="wiki-qa", seed=9, fractions=[0.5, 0.2, 0.1, 0.2], ood_topics=[]) is None


# --------------------------------------------------------------------------------------------- the split itself


def test_the_light_split_is_the_one_the_builder_uses():
    from workbench.data import article_splits, wikiqa

    assert wikiqa.assign_splits is article_splits.assign_splits
    articles = wikiqa.load_articles()
    _, light = article_splits.summaries_articles()
    assert [(a.doc_id, a.topic) for a in light] == [(a.doc_id, a.topic) for a in articles]
    full = wikiqa.assign_splits(articles, seed=5, fractions=[0.4, 0.2, 0.2, 0.2], ood_topics=["Arts", "History"])
    ids = article_splits.split_articles("val", seed=5, fractions=[0.4, 0.2, 0.2, 0.2], ood_topics=["History", "Arts"])
    assert ids == {doc_id for doc_id, split in full.items() if split == "val"}


# --------------------------------------------------------------------------------------------- tune_reader


def test_tune_reader_refuses_to_score_on_its_training_split():
    error = refused("tune-reader", "tune_reader.eval_split=train")
    assert str(error.where).endswith("tune_reader.eval_split") and "another split than the training one" in error.what
    error = refused("tune-reader", "tune_reader.split=val")  # eval_split stays val
    assert str(error.where).endswith("tune_reader.eval_split")
    load_recipe("tune-reader", ["tune_reader.split=train", "tune_reader.eval_split=null"])


def test_tune_reader_checks_its_section_when_it_runs_too():
    from types import SimpleNamespace

    from workbench.stages.tune_reader import run as tune_reader

    section = SimpleNamespace(split="calib", eval_split="calib", modes=["rag"])
    with pytest.raises(ConfigError, match="another split than the training one"):
        tune_reader.run(SimpleNamespace(config=SimpleNamespace(tune_reader=section)))


def test_save_lora_adapter_writes_the_record(tiny_lm_dir, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from workbench.assets import resolve_generator
    from workbench.backends.lora import READER_FORMAT, read_adapter, save_lora_adapter
    from workbench.stages.tune_reader.run import training_data

    record = training_data(load_recipe("quickstart", ["seed=0"]).config, "train")
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_lm_dir), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"])
    )
    save_lora_adapter(
        model,
        tmp_path,
        base_model=str(tiny_lm_dir),
        base_fingerprint=resolve_generator(str(tiny_lm_dir)).fingerprint,
        settings={"r": 2, "alpha": 4, "dropout": 0.0, "target_modules": ["q_proj"], "split": "train"},
        decisions=["rag"],
        adapter_format=READER_FORMAT,
        training_data=record,
    )
    payload, _ = read_adapter(tmp_path)
    assert payload["training_data"] == record


def test_the_training_record_leaves_the_adapters_identity_unchanged(tmp_path):
    """Provenance is not weights: the embedded reader's fingerprint (and every cache keyed by it) is what it was
    before the record was added, and adding or removing the record never changes an adapter's identity."""
    import json

    from workbench.assets import embedded_adapter_path
    from workbench.backends.lora import adapter_identity

    path = embedded_adapter_path("smollm2-reader")
    payload = json.loads(path.read_text())
    assert "training_data" in payload
    shipped_before = "dc87e6f838ee2bf016f0834d877761deabe2773c8631501c8882c22b3620d2d2"  # the file's sha256 then
    assert adapter_identity(path) == shipped_before
    bare = tmp_path / "adapter.json"
    bare.write_text(
        json.dumps({k: v for k, v in payload.items() if k != "training_data"}, indent=1, sort_keys=True) + "\n"
    )
    assert adapter_identity(bare) == adapter_identity(path)
    changed = dict(payload, r=payload["r"] + 1)
    other = tmp_path / "other.json"
    other.write_text(json.dumps(changed, indent=1, sort_keys=True) + "\n")
    assert adapter_identity(other) != adapter_identity(path)
