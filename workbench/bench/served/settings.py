"""The 'bench_served' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView, check_own_section


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
    engines: list[Literal["serve_model", "serve_model_continuous", "llama_cpp", "llama_server"]] = doc(
        "servers measured: serve_model (`workbench serve-model --no-continuous`: request-level batching),"
        " serve_model_continuous (`workbench serve-model`, continuous batching: its default), llama_cpp"
        " (llama-cpp-python's server on the embedded GGUF file; skipped with a note when the package is not"
        " installed), llama_server (llama.cpp's own `llama-server` with parallel slots on the same file; skipped with"
        " a note when the binary is not found)",
        ["serve_model", "llama_cpp"],
    )
    llama_server: str = doc(
        "the llama_server engine's binary: a path, or a name looked up on PATH (build it from llama.cpp's sources:"
        " docs/served-models.md)",
        "llama-server",
    )
    llama_server_slots: int = doc(
        "llama-server's parallel slots (--parallel): the requests it decodes together, in one continuous batch", 16
    )


def check(config: RecipeView) -> None:
    """bench_served's load check: :func:`validate_section` on its section."""
    check_own_section("bench_served", validate_section, config)


def validate_section(section: Any) -> None:
    """Raise a one-line :class:`ConfigError` naming ``bench_served.<key>`` for a count below 1 (questions, streamed
    requests and their max_tokens, top log-probs, llama-server slots) or a concurrency level below 1."""

    keys = ("questions", "stream_requests", "stream_max_tokens", "top_logprobs", "llama_server_slots")
    for key in keys:
        value = getattr(section, key)
        if value < 1:
            raise ConfigError(f"must be >= 1, got {value}", f"bench_served.{key}")
    if not section.concurrency or min(section.concurrency) < 1:
        raise ConfigError(f"levels must be >= 1, got {list(section.concurrency)}", "bench_served.concurrency")
