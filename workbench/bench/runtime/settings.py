"""The 'bench_runtime' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView


@dataclass
class BenchRuntimeSection:
    """The 'bench_runtime' stage: cold start, decision-path latency, parity with the run, and serve under load."""

    run: str = doc(
        "a finished run with calibrate / classify (and evaluate for end-to-end parity)", "artifacts/runs/quickstart"
    )
    bundle: str | None = doc("the bundle to measure (directory or .tar.gz; null: export the run now)", None)
    cold_starts: int = doc("fresh interpreters timed per source (directory, archive); the median is reported", 5)
    decision_repeats: int = doc("decide() calls timed per classifier backend (after a warm-up)", 2000)
    end_to_end_methods: list[str] = doc(
        "methods answered again by the runtime and compared with the evaluate traces",
        ["no_rag", "standard_rag", "d2rag"],
    )
    serve_method: str = doc("method the load uses", "no_rag")
    serve_questions: int = doc("distinct test questions the requests cycle through", 20)
    serve_requests: int = doc("requests per load (per concurrency level); at least the largest concurrency", 200)
    serve_concurrency: list[int] = doc("requests in flight at once: one load per value", [1, 8, 32])
    serve_abandoned: int = doc("clients that send a request at once and give up on it (then one more asks)", 8)
    serve_give_up_s: float = doc("seconds after which those clients disconnect without an answer", 0.5)
    fuzz: Literal["none", "ci", "bench"] = doc(
        "run the fuzz suite (tests/fuzz, a source checkout) with this Hypothesis profile and report its case counts: "
        "ci (derandomised, 40 cases per property), bench (random, 300), none",
        "bench",
    )


def check(config: RecipeView) -> None:
    """bench_runtime's load check: positive counts, distinct concurrencies the requests can fill, known methods."""
    section = config.bench_runtime
    for key in ("cold_starts", "decision_repeats", "serve_questions", "serve_requests", "serve_abandoned"):
        if getattr(section, key) < 1:
            raise ConfigError(f"must be >= 1, got {getattr(section, key)}", f"bench_runtime.{key}")
    levels = section.serve_concurrency
    if not levels or any(c < 1 for c in levels) or len(set(levels)) != len(levels):
        raise ConfigError(f"give distinct concurrencies >= 1, got {levels}", "bench_runtime.serve_concurrency")
    if max(levels) > section.serve_requests:
        raise ConfigError(
            f"serve_requests ({section.serve_requests}) must be >= the largest concurrency ({max(levels)})",
            "bench_runtime.serve_requests",
        )
    if not section.serve_give_up_s > 0:
        raise ConfigError(f"must be > 0, got {section.serve_give_up_s}", "bench_runtime.serve_give_up_s")
    from workbench.methods.registry import METHODS

    unknown = [m for m in [*section.end_to_end_methods, section.serve_method] if m not in METHODS]
    if unknown:
        raise ConfigError(f"unknown method(s) {unknown} (known: {', '.join(METHODS)})", "bench_runtime")
