"""The 'bench_gpu' stage's settings: its section of the recipe and its own load check.

The check is syntax only, so a recipe naming ``bench_gpu`` loads and validates on a machine without CUDA (the stage
itself skips there, saying why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.core.config import doc
from workbench.core.settings import RecipeView, check_own_section
from workbench.uncertainty.features import D2RAG_FEATURES


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
    features: list[str] = doc("features collected (default: the 18 of D²-RAG)", list(D2RAG_FEATURES))
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
    """bench_gpu's load check: :func:`workbench.bench.gpu.run.validate_section` on its section."""
    from workbench.bench.gpu.run import validate_section

    check_own_section("bench_gpu", validate_section, config)
