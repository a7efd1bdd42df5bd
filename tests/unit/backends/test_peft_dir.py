"""Every adapter the workbench writes or ships is a standard peft adapter directory: ``PeftModel.from_pretrained``
opens it and gives the workbench's merged model; its base is named portably (no path of the writing machine)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
IDS = ([5, 17, 42, 99, 7, 3], [1, 2, 3], [200, 11, 64, 64, 9, 120, 33])


def _peft_model(model_dir, seed=0):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    return get_peft_model(base, config).eval()


def _save(out, model_dir, base_model=None, adapter_format=None, training_data=None, seed=0):
    from workbench.backends.lora import ADAPTER_FORMAT, resolve_model, save_lora_adapter

    ref = str(base_model if base_model is not None else model_dir)
    save_lora_adapter(
        _peft_model(model_dir, seed),
        out,
        base_model=ref,
        base_fingerprint=resolve_model(ref).fingerprint,
        settings={**LORA, "learning_rate": 0.01, "split": "train"},
        decisions=["closed_book", "rag"] if training_data else ["refine", "enrich"],
        adapter_format=adapter_format or ADAPTER_FORMAT,
        training_data=training_data,
    )
    return Path(out)


def _logits(model, ids):
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].numpy()


def _assert_peft_matches_the_workbench(adapter_dir, base_dir):
    """``PeftModel.from_pretrained(base, adapter_dir)`` gives the workbench's merged model's logits (within 1e-4)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from workbench.backends.lora import resolve_adapter_model

    merged = AutoModelForCausalLM.from_pretrained(resolve_adapter_model(adapter_dir).path).eval()
    plain = AutoModelForCausalLM.from_pretrained(base_dir).eval()
    changed = max(np.abs(_logits(merged, ids) - _logits(plain, ids)).max() for ids in IDS)
    with_peft = PeftModel.from_pretrained(plain, adapter_dir).eval()
    for ids in IDS:
        np.testing.assert_allclose(_logits(with_peft, ids), _logits(merged, ids), atol=1e-4)
    assert changed > 1e-3  # the adapter is not a no-op, so the match means something


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def assert_portable(adapter_dir, *machine_paths):
    """No string of ``adapter_config.json`` is an absolute path, and neither it nor the model card names a path of
    this machine (``machine_paths``, the temporary directories the test wrote to)."""
    config_text = (Path(adapter_dir) / "adapter_config.json").read_text()
    config = json.loads(config_text)
    absolute = [s for s in _strings(config) if os.path.isabs(s) or s.startswith("~")]
    assert not absolute, absolute
    card = (Path(adapter_dir) / "README.md").read_text()
    for path in machine_paths:
        assert str(path) not in config_text and str(path) not in card


def test_the_distilled_controller_opens_with_peft(tiny_lm_dir, tmp_path):
    out = _save(tmp_path / "distill", tiny_lm_dir)
    _assert_peft_matches_the_workbench(out, tiny_lm_dir)
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["task_type"] == "CAUSAL_LM" and config["inference_mode"]
    assert (config["r"], config["lora_alpha"], config["target_modules"]) == (4, 8.0, ["q_proj", "v_proj"])
    assert config["base_model_name_or_path"].startswith(f"local:{Path(tiny_lm_dir).name}@sha256:")
    card = (out / "README.md").read_text()
    assert "InSemRAG controller" in card and "`refine`, `enrich`" in card and "PeftModel.from_pretrained" in card
    assert "distill_data" in card and "library_name: peft" in card
    assert_portable(out, tmp_path, tiny_lm_dir)


def test_a_reader_adapter_opens_with_peft_and_its_card_names_the_training_split(tiny_lm_dir, tmp_path):
    from workbench.backends.lora import READER_FORMAT

    record = {"dataset": "wiki-qa", "split": "train", "seed": 0, "fractions": [0.5, 0.2, 0.1, 0.2],
              "ood_topics": ["Arts"], "articles": 12, "articles_sha256": "ab" * 32}  # fmt: skip
    out = _save(tmp_path / "tune_reader", tiny_lm_dir, adapter_format=READER_FORMAT, training_data=record)
    _assert_peft_matches_the_workbench(out, tiny_lm_dir)
    card = (out / "README.md").read_text()
    assert "Answer reader" in card and "The `train` split of `wiki-qa`" in card and "ab" * 32 in card
    assert json.loads((out / "adapter.json").read_text())["training_data"] == record  # our format is kept
    assert_portable(out, tmp_path, tiny_lm_dir)


def test_the_peft_tensors_are_the_adapters_tensors(tiny_lm_dir, tmp_path):
    from safetensors.numpy import load_file

    from workbench.backends.lora import read_adapter

    out = _save(tmp_path / "a", tiny_lm_dir)
    _, ours = read_adapter(out)
    theirs = load_file(out / "adapter_model.safetensors")
    assert set(ours) == set(theirs) and all(np.array_equal(ours[k], theirs[k]) for k in ours)


def test_a_relative_base_and_an_adapter_base_are_named_without_paths(tiny_lm_dir, tmp_path, monkeypatch):
    """A base given as a relative path, and a reader tuned on another adapter: both named by directory name and
    weights digest; the adapter-on-adapter still opens with peft over its (merged) base."""
    from workbench.backends.lora import resolve_adapter_model

    monkeypatch.chdir(Path(tiny_lm_dir).parent)
    first = _save(tmp_path / "first", tiny_lm_dir, base_model=Path(tiny_lm_dir).name)
    assert json.loads((first / "adapter_config.json").read_text())["base_model_name_or_path"].startswith(
        f"local:{Path(tiny_lm_dir).name}@sha256:"
    )
    assert_portable(first, tmp_path, tiny_lm_dir)
    second = _save(tmp_path / "second", tiny_lm_dir, base_model=tmp_path / "first", seed=1)
    name = json.loads((second / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert name.startswith("adapter:first@sha256:")
    assert_portable(second, tmp_path, tiny_lm_dir)
    _assert_peft_matches_the_workbench(second, resolve_adapter_model(first).path)


def test_a_hub_base_keeps_its_hub_id_and_revision(monkeypatch):
    import workbench.backends.peft_dir as peft_dir  # binds model_weights at its top
    from workbench.assets import ResolvedModel
    from workbench.backends.peft_dir import base_reference, model_card, peft_config_document

    monkeypatch.setattr(peft_dir, "model_weights", lambda resolved: {"weights_sha256": "cd" * 32, "revision": "abc123"})
    hub = ResolvedModel("org/model", "org/model", "f" * 16, "hub")
    base = base_reference("org/model", hub)
    assert (base["name"], base["revision"]) == ("org/model", "abc123")
    payload = {"r": 2, "alpha": 4, "dropout": 0.0, "target_modules": ["v_proj", "q_proj"], "format": "x"}
    document = peft_config_document(payload, base)
    assert document["base_model_name_or_path"] == "org/model" and document["revision"] == "abc123"
    assert document["target_modules"] == ["q_proj", "v_proj"]  # sorted: the same bytes on every machine
    card = model_card(payload, base)
    assert "base_model: org/model" in card and 'revision="abc123"' in card


def test_copy_adapter_carries_the_peft_files_and_writes_them_for_an_older_adapter(tiny_lm_dir, tmp_path):
    """The export's copy (``learned/``): the peft files travel byte for byte; an adapter written before them (a run's
    ``peft_adapter/`` era) gets them written, byte-identical to what the stage writes today."""
    from workbench.backends.lora import copy_adapter
    from workbench.backends.peft_dir import PEFT_FILES

    source = _save(tmp_path / "run" / "distill", tiny_lm_dir)
    written = copy_adapter(source, tmp_path / "bundle" / "learned")
    assert [p.name for p in written] == [*PEFT_FILES, "adapter.safetensors", "adapter.json"]
    for name in (*PEFT_FILES, "adapter.json", "adapter.safetensors"):
        assert (tmp_path / "bundle" / "learned" / name).read_bytes() == (source / name).read_bytes()
    _assert_peft_matches_the_workbench(tmp_path / "bundle" / "learned", tiny_lm_dir)

    for name in PEFT_FILES:
        (source / name).unlink()
    copy_adapter(source, tmp_path / "old")
    for name in PEFT_FILES:
        assert (tmp_path / "old" / name).read_bytes() == (tmp_path / "bundle" / "learned" / name).read_bytes()


def test_copy_adapter_of_a_payload_without_a_base_copies_only_our_files(tmp_path):
    from workbench.backends.lora import copy_adapter
    from workbench.core.artifact_io import write_artifact

    weights = {"base_model.layers.0.q_proj.lora_A.weight": np.ones((2, 8), dtype=np.float32)}
    write_artifact(tmp_path / "src" / "adapter.json", {"kind": "lora_adapter", "version": 1, "r": 2}, weights)
    written = copy_adapter(tmp_path / "src", tmp_path / "dst")
    assert [p.name for p in written] == ["adapter.safetensors", "adapter.json"]


def test_the_embedded_reader_ships_a_peft_adapter_directory():
    """The shipped files: peft's config names the embedded base by name and weights digest, its LoRA settings and
    tensors are the adapter's, the card names its training split (the real model: tests/integration)."""
    from safetensors.numpy import load_file

    from workbench.assets import embedded_adapter_path
    from workbench.backends.lora import read_adapter

    file = embedded_adapter_path("smollm2-reader")
    payload, tensors = read_adapter(file)
    config = json.loads((file.parent / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"].startswith("workbench:smollm2@sha256:")
    assert (config["r"], config["lora_alpha"], config["lora_dropout"]) == (payload["r"], payload["alpha"], 0.0)
    assert config["target_modules"] == payload["target_modules"] and config["peft_type"] == "LORA"
    peft_tensors = load_file(file.parent / "adapter_model.safetensors")
    assert set(peft_tensors) == set(tensors) and all(np.array_equal(tensors[k], peft_tensors[k]) for k in tensors)
    card = (file.parent / "README.md").read_text()
    assert payload["training_data"]["articles_sha256"] in card and "The `train` split of `wiki-qa`" in card
    assert_portable(file.parent, Path.home(), "/tmp", "/work")


@pytest.mark.parametrize(
    "name", ["adapter.json", "adapter.safetensors", "adapter_config.json", "adapter_model.safetensors", "README.md"]
)
def test_the_package_data_ships_the_embedded_adapter_files(name):
    import fnmatch
    import tomllib

    root = Path(__file__).resolve().parents[3]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = f"workbench/embedded/smollm2-reader/{name}"
    assert (root / shipped).is_file()
    assert any(
        fnmatch.fnmatch(shipped, f"{package.replace('.', '/')}/{pattern}")
        for package, patterns in data.items()
        for pattern in patterns
    ), shipped
