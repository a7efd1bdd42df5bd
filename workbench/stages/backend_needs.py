"""What a run asks of its generator backend, from the tables of :mod:`workbench.methods.backend_needs`.

Two checks: :func:`check_in_process_only` when a recipe is
loaded (what no OpenAI-protocol server can give: hidden states, attention weights, per-step logits), and
:func:`check_capabilities` once the server is probed (the rest). Both refuse in one line naming the feature, method
or stage and the missing capability.
"""

from __future__ import annotations

from typing import Any

from workbench.backends.capabilities import IN_PROCESS_ONLY, Capabilities, describe_missing, missing_capabilities
from workbench.core.errors import ConfigError
from workbench.methods.backend_needs import LABEL_NEEDS, STAGE_NEEDS, feature_needs, method_needs, served_departures


def run_needs(config: Any) -> dict[str, frozenset[str]]:
    """``{"collect.features: inside": {...}, ...}``: what each part of the run that the recipe's stages select needs
    (keys name the recipe key and the item)."""
    stages = set(config.stages)
    out: dict[str, frozenset[str]] = {}
    if "collect" in stages:
        out["stage collect"] = frozenset({"logprobs"})  # every row keeps the greedy answer's log-probs
        for name in config.collect.features:
            out[f"collect.features: {name}"] = feature_needs(name)
        for label in config.collect.labels:
            out[f"collect.labels: {label}"] = LABEL_NEEDS.get(label, frozenset())
    if "seper_eval" in stages:
        out["stage seper_eval"] = LABEL_NEEDS["seper"]
    if "fit_utility" in stages:
        out["stage fit_utility"] = LABEL_NEEDS["seper"]
    if "evaluate" in stages:
        for method in config.evaluate.methods:
            out[f"evaluate.methods: {method}"] = method_needs(method)
    if "study" in stages:
        for method in config.study.methods:
            out[f"study.methods: {method}"] = method_needs(method)
    for stage in stages & set(STAGE_NEEDS):
        out[f"stage {stage}"] = STAGE_NEEDS[stage]
    return {key: needs for key, needs in out.items() if needs}


def check_in_process_only(config: Any) -> None:
    """At recipe load, for ``generator.backend: openai``: refuse what only the in-process backend gives."""
    if getattr(config.generator, "backend", "hf") != "openai":
        return
    for where, needs in run_needs(config).items():
        missing = sorted(needs & IN_PROCESS_ONLY)
        if missing:
            raise ConfigError(
                f"{where} needs {describe_missing(missing)}; use generator.backend: hf, or drop it from the recipe",
                "generator.backend",
            )


def check_capabilities(config: Any, capabilities: Capabilities, url: str) -> None:
    """Once the server is probed: refuse the first part of the run it cannot serve, naming it and what is missing."""
    for where, needs in run_needs(config).items():
        missing = missing_capabilities(needs, capabilities)
        if missing:
            raise ConfigError(
                f"{where} needs {describe_missing(missing)}, which the server at {url} does not give",
                "generator.backend",
            )


def approximations(config: Any, capabilities: Capabilities) -> dict[str, str]:
    """``{feature: why}`` for the run's collected features that a server with ``capabilities`` does not give exactly
    (:func:`~workbench.methods.backend_needs.served_departures`)."""
    return served_departures(config.collect.features if "collect" in config.stages else [], capabilities)
