"""The benchmark stages build their generator through the backend factory, so ``generator.device: auto`` (and
every other device the factory accepts) works there as in every other stage."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest

from tests.unit.stages.bench_context import bench_context
from workbench.core.errors import ConfigError
from workbench.recipe import RecipeConfig

QUESTIONS = ["Who wrote Hamlet?", "Which river flows through Paris?"]
CORPUS = {
    "chunk_id": ["hamlet#0", "paris#0"],
    "doc_id": ["hamlet", "paris"],
    "title": ["Hamlet", "Paris"],
    "text": ["Hamlet is a tragedy by William Shakespeare.", "Paris lies on the Seine."],
    "index": [0, 0],
}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))


def make_ctx(tmp_path: Path, model: Path, device: str, **inputs: Path) -> SimpleNamespace:
    """A stage context on the tiny model with ``generator.device = device``."""
    config = RecipeConfig(name="bench-devices", stages=["build_data"])
    config.generator.model, config.generator.device, config.generator.cache = str(model), device, False
    return bench_context(config, tmp_path, inputs, "test.bench_devices")


def test_bench_backends_generator_accepts_auto(tmp_path, tiny_lm_dir):
    from workbench.bench.backends import run as bench_backends

    ctx = make_ctx(tmp_path, tiny_lm_dir, "auto")
    section = ctx.config.bench
    section.samples, section.max_new_tokens, section.repeats = 2, 2, 1
    rows = [{"question": q} for q in QUESTIONS]
    out = bench_backends._bench_generator(ctx, rows, datasets.Dataset.from_dict(CORPUS))
    assert set(out) == {"closed-book", "RAG (5 passages)"} and out["closed-book"]["prompts"] == 2


def test_bench_backends_refuses_a_bad_device_in_one_line(tmp_path, tiny_lm_dir):
    from workbench.bench.backends import run as bench_backends

    ctx = make_ctx(tmp_path, tiny_lm_dir, "cuda:99")
    with pytest.raises(ConfigError, match=r"generator\.device: 'cuda:99' but torch sees"):
        bench_backends._bench_generator(ctx, [{"question": QUESTIONS[0]}], datasets.Dataset.from_dict(CORPUS))


def test_bench_features_accepts_auto(tmp_path, tiny_lm_dir, tiny_encoder_dir):
    from workbench.bench.features import run as bench_features
    from workbench.data.dataset_store import save_dataset_dict
    from workbench.data.schema import QAExample, examples_to_dataset

    examples = [QAExample(f"q{i}", q, ["x"]) for i, q in enumerate(QUESTIONS)]
    save_dataset_dict(datasets.DatasetDict({"test": examples_to_dataset(examples)}), tmp_path / "build_data" / "qa")
    ctx = make_ctx(tmp_path, tiny_lm_dir, "auto", build_data=tmp_path / "build_data")
    ctx.config.embedder.model = str(tiny_encoder_dir)
    section = ctx.config.bench_features
    section.questions, section.samples, section.max_new_tokens = 1, 2, 2
    section.features = ["confidence", "semantic_entropy"]  # with no NLI feature the nli ratio is undefined
    section.parts = ["cost"]  # the attention-memory part builds a model of its own, on the CPU
    summary = bench_features.run(ctx)
    assert summary["forwards_ratio"] > 0
