"""The 'bench_gpu' stage's settings: its section of the recipe and its own load check.

The check is syntax only, so a recipe naming ``bench_gpu`` loads and validates on a machine without CUDA (the stage
itself skips there, saying why).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView, check_own_section
from workbench.uncertainty.features import SEED_FEATURES, get_features


@dataclass
class BenchGpuSection:
    """The 'bench_gpu' stage: collection, serve-model and contrastive-decoding throughput and peak memory on a GPU,
    for random-weight models of given shapes."""

    device: str = doc(
        "torch device the models run on: cuda or cuda:N; without CUDA the stage skips and says so. 'cpu' is for the "
        "unit tests only (it measures, but the figures say nothing about a GPU)",
        "cuda",
    )
    dtype: Literal["bfloat16", "float16", "float32"] = doc("weights and activations of every model", "bfloat16")
    models: list[str] = doc(
        "model shapes measured, each built with random weights: smollm2-135m, llama-1b (tiny: unit tests only)",
        ["smollm2-135m", "llama-1b"],
    )
    split: str = doc("split the questions come from", "test")
    questions: int = doc(
        "questions per measurement, raised to the batch size / concurrency / pairs when that is larger (every batch "
        "full)",
        16,
    )
    features: list[str] = doc("features collected (default: the seed feature set (18))", list(SEED_FEATURES))
    samples: int = doc("answers sampled per question (N)", 5)
    temperature: float = doc("sampling temperature", 0.7)
    max_new_tokens: int = doc(
        "length cap of the greedy answer and of each sample; contrastive decoding decodes exactly this many tokens", 16
    )
    paraphrases: int = doc("self_detection: the question plus P - 1 paraphrases (P)", 5)
    batch_sizes: list[int] = doc(
        "(a) in-process collection: the generator's batch size, one measurement each", [1, 8, 32, 64]
    )
    concurrency: list[int] = doc(
        "(b) serve-model: requests in flight, one measurement each ([]: not measured)", [1, 8, 32, 64]
    )
    serve_prompts_per_request: int = doc(
        "(b) prompts per request the client sends (1: one request per prompt, so concurrency is requests in flight)", 1
    )
    top_logprobs: int = doc("(b) alternatives per token asked of serve-model (its --max-logprobs)", 20)
    decode_batch_sizes: list[int] = doc(
        "(c) contrastive vs greedy decoding: pairs decoded at once, one measurement each ([]: not measured)",
        [1, 8, 32],
    )
    alpha: float = doc("(c) contrast strength α", 1.0)
    k: int = doc("(c) passages in the expert (with-context) prompt", 5)
    passage_chars: int = doc("(c) each passage is cut to this many characters", 400)
    repeats: int = doc("timed runs of every measurement after one warm-up run (median and min-max reported)", 3)


def check(config: RecipeView) -> None:
    """bench_gpu's load check: :func:`validate_section` on its section."""
    check_own_section("bench_gpu", validate_section, config)


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only Llama shape, the numbers a ``transformers.LlamaConfig`` takes. ``vocab`` is the smallest
    vocabulary: the model is made as wide as its tokenizer when that is larger (None: the tokenizer's size)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int | None
    what: str


MODEL_SHAPES: dict[str, ModelShape] = {
    "smollm2-135m": ModelShape(576, 30, 9, 3, 1536, 49152, "SmolLM2-135M's shape (the embedded model's)"),
    "llama-1b": ModelShape(2048, 16, 32, 8, 8192, 128256, "Llama-3.2-1B's shape"),
    "tiny": ModelShape(64, 2, 4, 2, 128, None, "a 2-layer toy for the unit tests"),
}
"""The shapes ``bench_gpu.models`` may name."""


_DEVICE = re.compile(r"cpu|cuda(:\d+)?")


def validate_section(section: Any) -> None:
    """Raise a one-line :class:`ConfigError` naming ``bench_gpu.<key>`` for a setting that cannot be measured: a device
    other than cpu / cuda / cuda:N, no model or an unknown or repeated shape, an unknown feature or none, no batch
    size, a list with a value < 1 or a repeat, a count < 1, a non-finite or negative α, a temperature ≤ 0. Syntax
    only: whether this machine has CUDA is the stage's business (it skips)."""

    if not isinstance(section.device, str) or not _DEVICE.fullmatch(section.device):
        raise ConfigError(f"unknown device {section.device!r} (use cuda, cuda:N, or cpu for tests)", "bench_gpu.device")
    models = list(section.models)
    unknown = [m for m in models if m not in MODEL_SHAPES]
    if not models or unknown or len(set(models)) != len(models):
        raise ConfigError(f"give distinct known shapes ({', '.join(MODEL_SHAPES)}), got {models}", "bench_gpu.models")
    if not section.features:
        raise ConfigError("needs at least one feature", "bench_gpu.features")
    get_features(list(section.features))  # unknown names → ConfigError
    if not section.batch_sizes:
        raise ConfigError("needs at least one batch size", "bench_gpu.batch_sizes")
    for key in ("batch_sizes", "concurrency", "decode_batch_sizes"):
        values = list(getattr(section, key))
        if any(v < 1 for v in values) or len(set(values)) != len(values):
            raise ConfigError(f"give distinct values >= 1, got {values}", f"bench_gpu.{key}")
    for key in (
        "questions",
        "samples",
        "max_new_tokens",
        "paraphrases",
        "serve_prompts_per_request",
        "top_logprobs",
        "k",
        "passage_chars",
        "repeats",
    ):
        value = getattr(section, key)
        if value < 1:
            raise ConfigError(f"must be >= 1, got {value}", f"bench_gpu.{key}")
    if not (math.isfinite(section.alpha) and section.alpha >= 0):
        raise ConfigError(f"must be finite and >= 0, got {section.alpha}", "bench_gpu.alpha")
    if not section.temperature > 0:
        raise ConfigError(f"must be > 0, got {section.temperature}", "bench_gpu.temperature")
