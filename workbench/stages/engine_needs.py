"""What the methods a recipe runs ask of the user's retrieval engine (``retrieval.backend`` external).

Over an external backend, a method's own indexes (DTR's dense index, InSemRAG's channels) are the engine's channels
(:meth:`~workbench.methods.base.Tools.engine_channel`). :func:`check_engine_needs` refuses at recipe load, in one
line naming the method's options, a method that searches a channel the backend lacks (:data:`~workbench.backends.
retrieval_engines.ENGINES`) or settings that need an index only this process can build (InSemRAG's token windows,
``seper_eval``'s corpus sample).
Each method's settings say what they need (``engine_channels()``, ``engine_refusal()``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from workbench.core.errors import ConfigError


def _method_uses(config: Any) -> Iterator[tuple[str, str, Any]]:
    """``(key, method, its MethodConfig)`` for every method the recipe's stages build over the run's retriever (the
    evaluate section's configs, made once at load; distill_data's InSemRAG options configured here)."""
    from workbench.methods.registry import configure

    stages = set(config.stages)
    if "evaluate" in stages:
        for name in config.evaluate.methods:
            yield f"evaluate.options.{name}", name, config.evaluate.method_config(name)
    if "study" in stages:
        for name in config.study.methods:
            yield f"evaluate.options.{name}", name, config.evaluate.method_config(name)
    if "distill_data" in stages:
        yield "distill_data.insemrag", "insemrag", configure("insemrag", dict(config.distill_data.insemrag or {}))


def check_engine_needs(config: Any) -> None:
    """Over an external ``retrieval.backend``: every method the run builds searches only channels the backend offers
    and no index of this process's own, and ``seper_eval`` searches the whole corpus; else a one-line
    :class:`ConfigError` naming the key."""
    from workbench.backends.retrieval_engines import ENGINES

    backend = config.retrieval.backend
    spec = ENGINES[backend]
    if not spec.external:
        return
    if "seper_eval" in config.stages and config.seper_eval.corpus_size is not None:
        raise ConfigError(
            f"backend {backend} holds the whole corpus, so a sample of it cannot be searched there: set null",
            "seper_eval.corpus_size",
        )
    for key, name, method_config in _method_uses(config):
        settings = method_config.checked_settings()
        refusal = settings.engine_refusal() if hasattr(settings, "engine_refusal") else None
        if refusal is not None:
            raise ConfigError(f"{name} over backend {backend}: {refusal[0]}", f"{key}.{refusal[1]}")
        needs = settings.engine_channels() if hasattr(settings, "engine_channels") else frozenset()
        missing = sorted(needs - spec.channels)
        if missing:
            raise ConfigError(
                f"{name} searches the {' and '.join(missing)} channel, which backend {backend} lacks (it offers"
                f" {', '.join(sorted(spec.channels))})",
                key,
            )
