"""The LoRA adapter artifact: saving, loading (merge over the base, cached once) and refusing bad adapters."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from workbench.core.errors import AssetError, DataError

SETTINGS = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"], "learning_rate": 0.01}


@pytest.fixture(scope="module")
def peft_model(tiny_lm_dir):
    """The tiny Llama with a LoRA adapter whose A and B are both random (non-zero update)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_lm_dir)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    return get_peft_model(base, config).eval()


@pytest.fixture()
def adapter_dir(tmp_path, peft_model, tiny_lm_dir):
    from workbench.assets import resolve_generator
    from workbench.backends.lora import save_lora_adapter

    base = resolve_generator(str(tiny_lm_dir))
    out = tmp_path / "distill"
    save_lora_adapter(
        peft_model,
        out,
        base_model=str(tiny_lm_dir),
        base_fingerprint=base.fingerprint,
        settings=SETTINGS,
        decisions=["refine", "enrich"],
    )
    return out


def _logits(model, ids):
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].numpy()


def test_adapter_round_trips_to_the_merged_model(adapter_dir, peft_model, tiny_lm_dir):
    import copy

    from transformers import AutoModelForCausalLM

    from workbench.assets import resolve_generator
    from workbench.backends.lora import resolve_adapter_model

    payload = json.loads((adapter_dir / "adapter.json").read_text())
    assert payload["kind"] == "lora_adapter" and payload["format"] == "insemrag-controller-v1"
    assert (payload["r"], payload["alpha"], payload["target_modules"]) == (4, 8.0, ["q_proj", "v_proj"])
    assert payload["decisions"] == ["refine", "enrich"] and payload["training"] == {"learning_rate": 0.01}
    assert (adapter_dir / "adapter_config.json").is_file()  # a peft adapter directory too (test_peft_dir.py)
    assert (adapter_dir / "adapter_model.safetensors").is_file() and (adapter_dir / "README.md").is_file()

    resolved = resolve_adapter_model(adapter_dir)  # the directory or its adapter.json
    base = resolve_generator(str(tiny_lm_dir))
    assert resolved.fingerprint != base.fingerprint and resolved.source == "adapter"
    merged = AutoModelForCausalLM.from_pretrained(resolved.path).eval()
    expected = copy.deepcopy(peft_model).merge_and_unload()
    ids = [5, 17, 42, 99, 7, 3]
    np.testing.assert_allclose(_logits(merged, ids), _logits(expected, ids), atol=1e-5)
    # the adapter changes the model: the merged outputs are not the base's
    plain = AutoModelForCausalLM.from_pretrained(tiny_lm_dir).eval()
    assert np.abs(_logits(merged, ids) - _logits(plain, ids)).max() > 1e-3
    # peft users load the directory over the base and get the same model
    from peft import PeftModel

    with_peft = PeftModel.from_pretrained(plain, adapter_dir).eval()
    np.testing.assert_allclose(_logits(with_peft, ids), _logits(expected, ids), atol=1e-5)

    config = Path(resolved.path) / "config.json"
    stamp = config.stat().st_mtime_ns
    again = resolve_adapter_model(adapter_dir / "adapter.json")
    assert (again.path, again.fingerprint) == (resolved.path, resolved.fingerprint)
    assert config.stat().st_mtime_ns == stamp  # merged once, then reused


def test_a_tampered_tensor_file_is_refused(adapter_dir):
    from workbench.backends.lora import resolve_adapter_model

    blob = bytearray((adapter_dir / "adapter.safetensors").read_bytes())
    blob[-1] ^= 0xFF
    (adapter_dir / "adapter.safetensors").write_bytes(bytes(blob))
    with pytest.raises(DataError, match="sha256"):
        resolve_adapter_model(adapter_dir)


def test_an_artifact_of_another_kind_is_refused(adapter_dir):
    from workbench.backends.lora import resolve_adapter_model

    path = adapter_dir / "adapter.json"
    payload = json.loads(path.read_text())
    payload["kind"] = "mlp"
    path.write_text(json.dumps(payload))
    with pytest.raises(DataError, match="not a LoRA adapter"):
        resolve_adapter_model(path)


def test_tensor_names_that_do_not_match_the_base_are_refused(adapter_dir):
    from workbench.backends.lora import resolve_adapter_model
    from workbench.core.artifact_io import read_artifact, write_artifact

    path = adapter_dir / "adapter.json"
    payload, tensors = read_artifact(path)
    renamed = {k.replace("layers.1.", "layers.7."): v for k, v in tensors.items()}
    write_artifact(path, payload, renamed)  # a valid artifact (fresh sha256) whose names fit no layer of the base
    with pytest.raises(DataError, match=r"do not match the LoRA layers.*missing.*unexpected"):
        resolve_adapter_model(path)


def test_a_missing_adapter_or_a_changed_base_is_an_asset_error(adapter_dir, tmp_path):
    from workbench.backends.lora import resolve_adapter_model
    from workbench.core.artifact_io import read_artifact, write_artifact

    with pytest.raises(AssetError, match="no LoRA adapter here"):
        resolve_adapter_model(tmp_path / "nowhere")
    path = adapter_dir / "adapter.json"
    payload, tensors = read_artifact(path)
    write_artifact(path, {**payload, "base_fingerprint": "0" * 16}, tensors)
    with pytest.raises(AssetError, match="was trained on 0000"):
        resolve_adapter_model(path)
    write_artifact(path, {**payload, "base_model": str(tmp_path / "gone")}, tensors)
    with pytest.raises(AssetError, match="cannot resolve the adapter's base model"):
        resolve_adapter_model(path)


def test_a_generator_reference_may_name_an_adapter(adapter_dir, tiny_lm_dir, tmp_path, monkeypatch):
    """``generator.model`` takes an adapter: its directory, its adapter.json, or an embedded adapter name (a file
    shipped in the package); each resolves to the merged model, with its own fingerprint."""
    from workbench import assets
    from workbench.backends.lora import resolve_adapter_model, resolve_model

    merged = resolve_adapter_model(adapter_dir)
    for ref in (str(adapter_dir), str(adapter_dir / "adapter.json")):
        resolved = resolve_model(ref)
        assert (resolved.path, resolved.fingerprint, resolved.source) == (merged.path, merged.fingerprint, "adapter")
    assert resolve_model(str(tiny_lm_dir)).source == "local"  # a model directory stays a model

    monkeypatch.setitem(assets.EMBEDDED_ADAPTERS, "tiny-reader", str(adapter_dir / "adapter.json"))
    embedded = resolve_model("tiny-reader")
    assert (embedded.path, embedded.fingerprint, embedded.source) == (
        merged.path,
        merged.fingerprint,
        "embedded:tiny-reader",
    )
    monkeypatch.setitem(assets.EMBEDDED_ADAPTERS, "tiny-reader", str(tmp_path / "absent" / "adapter.json"))
    with pytest.raises(AssetError, match="embedded adapter 'tiny-reader' is missing"):
        resolve_model("tiny-reader")
    with pytest.raises(AssetError, match="smollm2-reader"):  # the error lists the embedded names, adapters too
        resolve_model("./no-such-model")


def test_a_reader_adapter_records_its_format_and_an_unknown_format_is_refused(peft_model, tiny_lm_dir, tmp_path):
    from workbench.assets import resolve_generator
    from workbench.backends.lora import READER_FORMAT, read_adapter, save_lora_adapter
    from workbench.core.artifact_io import read_artifact, write_artifact

    base = resolve_generator(str(tiny_lm_dir))
    common = {"base_model": str(tiny_lm_dir), "base_fingerprint": base.fingerprint, "settings": SETTINGS}
    save_lora_adapter(
        peft_model, tmp_path / "r", decisions=["closed_book", "rag"], adapter_format=READER_FORMAT, **common
    )
    payload, _ = read_adapter(tmp_path / "r")
    assert payload["format"] == "answer-reader-v1" and payload["decisions"] == ["closed_book", "rag"]
    with pytest.raises(ValueError, match="unknown adapter format"):
        save_lora_adapter(peft_model, tmp_path / "x", decisions=["rag"], adapter_format="nonsense", **common)
    path = tmp_path / "r" / "adapter.json"
    payload, tensors = read_artifact(path)
    write_artifact(path, {**payload, "format": "nonsense-v9"}, tensors)
    with pytest.raises(DataError, match="unknown adapter format 'nonsense-v9'"):
        read_adapter(path)


def test_a_merged_model_is_identified_by_its_adapter_and_base_not_by_its_merged_floats(adapter_dir, tiny_lm_dir):
    """The merge is a float product whose last bits may differ between machines; the merged model's weights digest
    (what bundles record) comes from the adapter file and the base weights, so it is the same everywhere."""
    import hashlib

    from workbench.assets import ADAPTER_SOURCE_FILE, weights_digest
    from workbench.backends.lora import resolve_adapter_model

    resolved = resolve_adapter_model(adapter_dir)
    source = json.loads((Path(resolved.path) / ADAPTER_SOURCE_FILE).read_text())
    assert source == {
        "adapter_sha256": hashlib.sha256((adapter_dir / "adapter.json").read_bytes()).hexdigest(),
        "base_weights_sha256": weights_digest(tiny_lm_dir),
    }
    digest = weights_digest(resolved.path)
    weights = next(Path(resolved.path).glob("*.safetensors"))
    blob = bytearray(weights.read_bytes())
    blob[-1] ^= 0x01  # another machine's last bit
    weights.write_bytes(bytes(blob))
    assert weights_digest(resolved.path) == digest
    assert digest not in (weights_digest(tiny_lm_dir), None)
