"""InSemRAG's part in the pipeline's checks: what the recipe must hold for it to be studied. Called through the
spec's :class:`~workbench.methods.spec.MethodHooks`; nothing here imports a stage (``config`` is the recipe view)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench.core.errors import ConfigError

__all__ = ["check_study"]


def check_study(config: Any, space: Mapping[str, Any]) -> None:
    """study: InSemRAG's keep_threshold filters an LM controller's relevance scores; the heuristic controller has
    none, so tuning it there would tune nothing."""
    if "keep_threshold" not in (config.study.space.get("insemrag") or {}):
        return
    options = config.evaluate.options.get("insemrag") or {}
    controller = options.get("controller", "prompted") if isinstance(options, dict) else "prompted"
    if controller == "heuristic":
        raise ConfigError(
            "keep_threshold changes nothing under controller: heuristic (it keeps any candidate sharing a keyword "
            "with the query; keep_threshold filters an LM controller's p(Yes)): drop it from the space, or tune a "
            "prompted or distilled controller",
            "study.space.insemrag.keep_threshold",
        )
