"""The 'bench_served' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.core.config import doc


@dataclass
class BenchServedSection:
    """The 'bench_served' stage: features collected in-process and through OpenAI-compatible servers."""

    split: str = doc("split whose first questions are collected", "test")
    questions: int = doc("questions collected by each engine", 24)
    features: list[str] = doc(
        "features compared (those an engine cannot serve are listed with the capability it lacks)",
        [
            "confidence",
            "dtr_nll",
            "entropy",
            "semantic_entropy",
            "eccentricity_uncertainty",
            "matrix_degree_uncertainty",
            "sum_eigen_uncertainty",
            "ptrue",
            "verbalized_confidence",
        ],
    )
    concurrency: list[int] = doc("requests in flight per served measurement", [1, 4, 16])
    stream_requests: int = doc(
        "streamed one-question chat requests sent per concurrency level (time to first token, latency, tokens/s)", 32
    )
    stream_max_tokens: int = doc("max_tokens of each streamed request", 16)
    top_logprobs: int = doc("alternatives per token asked of the servers (and serve-model's --max-logprobs)", 20)
    engines: list[Literal["serve_model", "serve_model_continuous", "llama_cpp"]] = doc(
        "servers measured: serve_model (`workbench serve-model`), serve_model_continuous (the same with --continuous),"
        " llama_cpp (llama-cpp-python's server on the embedded GGUF file; skipped with a note when the package is not"
        " installed)",
        ["serve_model", "llama_cpp"],
    )
