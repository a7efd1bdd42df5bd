"""Every backend gets its recipe's device: ``generator.device``, ``embedder.device`` and ``nli.device`` reach the
constructors through :class:`~workbench.stages.context.Resources`, the bench-features stage and the runtime;
``auto`` resolves to cuda when torch sees a GPU (faked here: nothing is moved); bm25s is imported with JAX kept on
the CPU. Tested on CPU only."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from workbench.backends.cost import CostCounter
from workbench.core.errors import ConfigError
from workbench.recipe import RecipeConfig, load_recipe
from workbench.stages.context import Resources

CORPUS = {
    "chunk_id": ["hamlet#0", "paris#0"],
    "doc_id": ["hamlet", "paris"],
    "title": ["Hamlet", "Paris"],
    "text": ["Hamlet is a tragedy by William Shakespeare.", "Paris lies on the Seine."],
}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))


def fake_gpus(monkeypatch, count: int) -> None:
    """Make torch report ``count`` CUDA devices (nothing is ever placed on them)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


class Recorder:
    """Stands in for a backend class: records the keyword arguments it was built with, loads nothing."""

    built: list[dict[str, Any]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs
        self.device = kwargs.get("device")
        type(self).built.append(kwargs)


def recorder(monkeypatch, module: Any, name: str) -> type[Recorder]:
    """Replace ``module.name`` by a fresh :class:`Recorder` subclass and return it."""
    cls = type(name, (Recorder,), {"built": []})
    monkeypatch.setattr(module, name, cls)
    return cls


def config_with(**devices: str) -> RecipeConfig:
    """A recipe config whose ``<section>.device`` is set for each keyword (generator / embedder / nli)."""
    config = RecipeConfig(name="device-wiring", stages=["build_data"])
    for section, device in devices.items():
        getattr(config, section).device = device
    return config


# ------------------------------------------------------------------------------------------------ JAX / bm25s


def test_keep_jax_on_cpu_sets_cpu_only_when_the_user_did_not(monkeypatch):
    from workbench.backends.retrievers import keep_jax_on_cpu

    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    keep_jax_on_cpu()
    assert os.environ["JAX_PLATFORMS"] == "cpu"
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    keep_jax_on_cpu()
    assert os.environ["JAX_PLATFORMS"] == "cuda"


def test_every_bm25s_import_site_keeps_jax_on_cpu(monkeypatch):
    from workbench.backends.retrievers import BM25Retriever

    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    BM25Retriever(CORPUS)  # builds the index (tokenises through bm25s) and writes it to the cache
    assert os.environ.get("JAX_PLATFORMS") == "cpu"
    monkeypatch.delenv("JAX_PLATFORMS")
    retriever = BM25Retriever(CORPUS)
    assert retriever.index_source == "disk" and os.environ.get("JAX_PLATFORMS") == "cpu"
    monkeypatch.delenv("JAX_PLATFORMS")
    assert retriever.search(["Who wrote Hamlet?"], k=1)[0].ids[0] == "hamlet#0"
    assert os.environ.get("JAX_PLATFORMS") == "cpu"


# ------------------------------------------------------------------------------------------------ recipe keys


@pytest.mark.parametrize("key", ["generator.device", "embedder.device", "nli.device"])
def test_recipe_refuses_a_bad_device_at_load(key):
    with pytest.raises(ConfigError, match="unknown device 'tpu'") as info:
        load_recipe("quickstart", [f"{key}=tpu"])
    assert key in str(info.value)
    loaded = load_recipe("quickstart", [f"{key}=auto"])
    section, _, name = key.partition(".")
    assert getattr(getattr(loaded.config, section), name) == "auto"


def test_embedder_and_nli_default_to_cpu_and_are_documented():
    from workbench.recipe import recipe_template

    config = RecipeConfig(name="defaults", stages=["build_data"])
    assert (config.generator.device, config.embedder.device, config.nli.device) == ("cpu", "cpu", "cpu")
    template = recipe_template()
    assert template.count("device: cpu  # str — torch device") == 3
    assert "near-tied tokens can flip" in template


# ------------------------------------------------------------------------------------------------ Resources


@pytest.mark.parametrize(
    ("device", "gpus", "expected"), [("auto", 1, "cuda"), ("auto", 0, "cpu"), ("cuda:1", 2, "cuda:1")]
)
def test_resources_hand_each_section_device_to_its_backend(monkeypatch, tmp_path, device, gpus, expected):
    import workbench.backends.embedder as embedder_module
    import workbench.backends.generator as generator_module
    import workbench.backends.nli as nli_module

    fake_gpus(monkeypatch, gpus)
    generator_cls = recorder(monkeypatch, generator_module, "Generator")
    embedder_cls = recorder(monkeypatch, embedder_module, "Embedder")
    hf_cls = recorder(monkeypatch, nli_module, "HFSequenceClassificationNLI")
    cross_cls = recorder(monkeypatch, nli_module, "CrossEncoderNLI")
    config = config_with(generator=device, embedder=device, nli=device)
    config.generator.model = str(tmp_path)  # a local directory: resolving it loads nothing
    resources = Resources(config, CostCounter())

    assert resources.generator().device == expected
    assert resources.embedder().device == expected
    assert resources.judge("hf", "some/checkpoint").device == expected
    assert resources.judge("cross_encoder", "some/dir").device == expected
    equivalence = resources.judge("answer_equivalence")  # no model of its own: it uses the shared embedder
    assert equivalence.embedder is resources.embedder()
    assert [len(c.built) for c in (generator_cls, embedder_cls, hf_cls, cross_cls)] == [1, 1, 1, 1]


def test_only_the_nli_section_places_the_nli_model(monkeypatch):
    import workbench.backends.embedder as embedder_module
    import workbench.backends.nli as nli_module

    fake_gpus(monkeypatch, 2)
    recorder(monkeypatch, embedder_module, "Embedder")
    recorder(monkeypatch, nli_module, "HFSequenceClassificationNLI")
    resources = Resources(config_with(embedder="cuda:1", nli="cpu"), CostCounter())
    assert resources.embedder().device == "cuda:1"
    assert resources.judge("hf", "some/checkpoint").device == "cpu"


@pytest.mark.parametrize(("section", "build"), [("embedder", "embedder"), ("nli", "judge")])
def test_a_missing_gpu_is_one_line_naming_the_section(monkeypatch, section, build):
    fake_gpus(monkeypatch, 1)
    config = config_with(**{section: "cuda:3"})
    config.nli.kind = "hf"
    with pytest.raises(ConfigError, match=rf"^{section}\.device: 'cuda:3' but torch sees 1 GPU"):
        getattr(Resources(config, CostCounter()), build)()


def test_real_tiny_models_land_on_the_resolved_device(monkeypatch, tmp_path, tiny_encoder_dir):
    from tests.tiny_models import build_tiny_encoder

    fake_gpus(monkeypatch, 0)
    config = config_with(embedder="auto", nli="auto")
    config.embedder.model = str(tiny_encoder_dir)
    nli_dir = Path(build_tiny_encoder(tmp_path / "nli", num_labels=3))
    model_config = json.loads((nli_dir / "config.json").read_text())  # named labels: the judge maps them by name
    model_config["id2label"] = {"0": "entailment", "1": "neutral", "2": "contradiction"}
    model_config["label2id"] = {v: int(k) for k, v in model_config["id2label"].items()}
    (nli_dir / "config.json").write_text(json.dumps(model_config))
    resources = Resources(config, CostCounter())
    embedder = resources.embedder()
    assert {p.device.type for p in embedder._model.model.parameters()} == {"cpu"}
    assert embedder.encode(["a question"]).shape == (1, 32)
    judge = resources.judge("hf", nli_dir)
    assert judge.device == "cpu" and {p.device.type for p in judge._model.parameters()} == {"cpu"}


# ------------------------------------------------------------------------------------------------ other sites


class Stop(Exception):
    """Raised by a stand-in builder once it has recorded what it was given."""


def test_bench_features_builds_its_embedder_on_embedder_device(monkeypatch, tmp_path):
    import datasets

    from workbench.bench.features import run as bench_features
    from workbench.data.dataset_store import save_dataset_dict
    from workbench.data.schema import QAExample, examples_to_dataset

    seen: dict[str, Any] = {}

    def fake_embedder(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        raise Stop

    # the benchmark imports the factory's builders at its top: patch the names it calls
    monkeypatch.setattr(bench_features, "build_generator", lambda *a, **k: SimpleNamespace(device="cpu"))
    monkeypatch.setattr(bench_features, "build_embedder", fake_embedder)
    examples = [QAExample("q0", "Who wrote Hamlet?", ["Shakespeare"])]
    save_dataset_dict(datasets.DatasetDict({"test": examples_to_dataset(examples)}), tmp_path / "build_data" / "qa")
    config = config_with(embedder="cuda:1")
    config.bench_features.features = ["confidence"]
    ctx = SimpleNamespace(
        config=config,
        inputs={"build_data": tmp_path / "build_data"},
        out_dir=tmp_path,
        resources=Resources(config, CostCounter()),
        counter=CostCounter(),
        log=logging.getLogger("test.device_wiring"),
    )
    with pytest.raises(Stop):
        bench_features.run(ctx)
    assert seen["device"] == "cuda:1" and seen["device_key"] == "embedder.device"


def test_runtime_gives_its_device_to_every_model(monkeypatch):
    from workbench.runtime import tools
    from workbench.runtime.options import runtime_options

    seen: dict[str, str] = {}

    def fake(name: str) -> Any:
        def build(*args: Any, **kwargs: Any) -> Any:
            seen[name] = kwargs.get("device")
            return SimpleNamespace()

        return build

    for name in ("build_generator", "build_embedder", "build_judge"):
        monkeypatch.setattr(tools, name, fake(name))  # the runtime's tools bind the factory's builders
    monkeypatch.setattr(tools, "build_retriever", lambda *a, **k: SimpleNamespace())
    monkeypatch.setattr(tools, "_checked_model", lambda *a, **k: "model")
    monkeypatch.setattr(tools, "runtime_corpus", lambda *a, **k: dict(CORPUS))
    manifest = {
        "models": {
            "generator": {"ref": "smollm2"},
            "embedder": {"ref": "minilm"},
            "nli": {"kind": "cross_encoder", "model": "nli-dir"},
        },
        "answering": {"retriever": "dense", "passage_chars": 400, "max_new_tokens": 16},
    }
    tools.build_runtime_tools(manifest, runtime_options({"device": "cuda:1"}), CostCounter(), [])
    assert seen == {"build_generator": "cuda:1", "build_embedder": "cuda:1", "build_judge": "cuda:1"}
