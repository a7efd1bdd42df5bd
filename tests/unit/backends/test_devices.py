"""Device strings and backend build failures: ``auto`` works everywhere a device reaches torch; a device that cannot
work, or a checkpoint that cannot load, is one line (a WorkbenchError), never a torch / transformers traceback."""

from __future__ import annotations

import shutil

import pytest
import torch

from workbench.backends.device import check_device, resolve_device
from workbench.backends.factory import build_embedder, build_generator
from workbench.core.errors import AssetError, ConfigError


def one_line(exc: BaseException) -> str:
    """The message of ``exc``, asserted to be a single line."""
    text = str(exc)
    assert "\n" not in text, text
    return text


def fake_gpus(monkeypatch, count: int) -> None:
    """Make torch report ``count`` CUDA devices."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_auto_picks_cuda_only_when_torch_sees_a_gpu(monkeypatch):
    fake_gpus(monkeypatch, 0)
    assert resolve_device("auto") == "cpu"
    fake_gpus(monkeypatch, 2)
    assert resolve_device("auto") == "cuda"
    assert resolve_device("cuda:1") == "cuda:1" and resolve_device("cpu") == "cpu"


@pytest.mark.parametrize("device", ["tpu", "CPU", "cuda:", "cuda:x", "gpu", "", 3])
def test_unknown_device_strings_are_refused_without_torch(device):
    with pytest.raises(ConfigError, match="unknown device") as info:
        check_device(device, "generator.device")
    assert one_line(info.value).startswith("generator.device: ")
    with pytest.raises(ConfigError, match="unknown device"):
        resolve_device(device)


def test_a_gpu_that_is_not_there_is_refused(monkeypatch):
    fake_gpus(monkeypatch, 1)
    with pytest.raises(ConfigError, match=r"'cuda:99' but torch sees 1 GPU\(s\)") as info:
        resolve_device("cuda:99", "generator.device")
    assert one_line(info.value).startswith("generator.device: ")
    fake_gpus(monkeypatch, 0)
    with pytest.raises(ConfigError, match="no GPU"):
        resolve_device("cuda")


def test_embedder_and_nli_judge_accept_auto(tiny_encoder_dir, tmp_path, monkeypatch):
    from tests.tiny_models import build_tiny_encoder
    from workbench.backends.embedder import Embedder
    from workbench.backends.nli import HFSequenceClassificationNLI

    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))
    fake_gpus(monkeypatch, 0)
    embedder = Embedder(str(tiny_encoder_dir), device="auto", cache=False)
    assert embedder.encode(["a question"]).shape == (1, 32)
    order = ["entailment", "neutral", "contradiction"]
    judge = HFSequenceClassificationNLI(build_tiny_encoder(tmp_path / "nli", num_labels=3), order, device="auto")
    assert judge.device == "cpu"
    with pytest.raises(ConfigError, match="unknown device"):
        Embedder(str(tiny_encoder_dir), device="tpu", cache=False)


def test_build_generator_with_auto_and_a_bad_device(tiny_lm_dir):
    assert build_generator(tiny_lm_dir, device="auto", cache=False).device in ("cpu", "cuda")
    with pytest.raises(ConfigError, match="unknown device") as info:
        build_generator(tiny_lm_dir, device="tpu", cache=False, device_key="generator.device")
    assert one_line(info.value).startswith("generator.device: ")


def test_a_corrupt_checkpoint_is_one_line(tiny_lm_dir, tiny_encoder_dir, tmp_path):
    broken = shutil.copytree(tiny_lm_dir, tmp_path / "broken-lm")
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(AssetError, match="cannot build the generator") as info:
        build_generator(broken, cache=False)
    assert str(broken) in one_line(info.value)
    encoder = shutil.copytree(tiny_encoder_dir, tmp_path / "broken-encoder")
    (encoder / "model.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(AssetError, match="embedder") as info:
        build_embedder(str(encoder), cache=False)
    one_line(info.value)
