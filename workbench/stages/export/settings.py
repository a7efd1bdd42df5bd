"""The 'export' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView
from workbench.monitoring.settings import DriftSettings


@dataclass
class ExportSection:
    """The 'export' stage: write the run's decision logic as a versioned bundle (docs/bundles.md)."""

    name: str = doc("bundle name; '{name}' is replaced by the recipe name", "{name}")
    version: str = doc(
        "semantic version X.Y.Z, or 'auto': the latest version when nothing changed, else its next patch", "auto"
    )
    dir: str = doc(
        "where bundles go: <dir>/<name>/<version>/ and <dir>/<name>/<name>-<version>.tar.gz", "artifacts/bundles"
    )
    methods: list[str] | None = doc(
        "methods in the bundle (null: evaluate.methods without the gold-using ones, a gold-using variant replaced by "
        "its gold-free twin)",
        None,
    )
    archive: bool = doc("also write the .tar.gz", True)
    on_retriever_failure: Literal["error", "closed_book"] = doc(
        "a bundle on an external retriever (pgvector, milvus): what an answer does when the engine fails at run time"
        " (after its retries): error (the caller gets the one-line engine error; `workbench serve` answers 503) or"
        " closed_book (answered without retrieval, with a note saying why). docs/retrieval.md",
        "error",
    )
    allow_approximate_features: bool = doc(
        "let the bundle, answering on a served model, score decision features that server does not give exactly"
        " (P(True) / verbalized confidence absent without echo; see docs/served-models.md) with calibrators fitted on"
        " exact values: every answer then carries a note naming them (false: such a server is refused at the first"
        " answer that computes them)",
        False,
    )
    drift: DriftSettings = doc(
        "drift monitoring of the bundle in serve (/metrics, /drift) and `workbench monitor`: the reference's bins and "
        "the alarm thresholds, stored in the bundle (docs/monitoring.md)",
        DriftSettings(),
    )


def exported_methods(config: RecipeView) -> list[str]:
    """The methods the export stage bundles (its explicit list, else the gold-free evaluate methods, with a gold
    variant's gold-free twin in its place)."""
    from workbench.methods.registry import METHOD_TABLE

    if config.export.methods is not None:
        return list(config.export.methods)
    specs = [METHOD_TABLE[m] for m in config.evaluate.methods if m in METHOD_TABLE]
    methods = [s.name for s in specs if not s.gold]
    twins = [s.gold_free_twin for s in specs if s.gold and s.gold_free_twin]
    return [*methods, *[t for t in dict.fromkeys(twins) if t not in methods]]


def decision_ready(config: RecipeView, method: str) -> bool:
    """Whether the stages that make ``method``'s learned parts (its spec's ``requires_stages``) run in this recipe."""
    from workbench.methods.registry import METHOD_TABLE

    spec = METHOD_TABLE.get(method)
    return spec is None or all(stage in config.stages for stage in spec.requires_stages)


def check_method_params(config: RecipeView) -> None:
    """evaluate.params → evaluate / export: each parameters file checked by its method's own rule (its spec's
    ``hooks.check_params``: D²-RAG's was tuned with a gold-free utility when it goes into a bundle, and sets no
    option the run's utility classifier makes inert)."""
    from workbench.bundle.learned import read_params
    from workbench.methods.registry import METHOD_TABLE

    exported = set(exported_methods(config)) if "export" in config.stages else set()
    for path in config.evaluate.params:
        try:
            params = read_params(Path(path))
        except ConfigError as exc:
            raise ConfigError(f"{exc.where}: {exc.what}", "evaluate.params") from None
        spec = METHOD_TABLE.get(params["method"])
        if spec is not None and spec.hooks.check_params is not None:
            spec.hooks.check_params(config, str(path), params, params["method"] in exported)


def check(config: RecipeView) -> None:
    """export's load check: a valid bundle name and version, gold-free methods, at least one method to bundle, a
    method with learned parts only with the stages that make them, and parameters files each method accepts (when
    evaluate does not run: evaluate checks them then, :func:`check_method_params`)."""
    from workbench.bundle.integrity import gold_methods
    from workbench.bundle.schema import check_name, parse_semver
    from workbench.methods.registry import METHOD_TABLE, METHODS

    section = config.export
    for method in section.methods or []:  # else export leaves such a method out
        if not decision_ready(config, method):
            stages = " and ".join(METHOD_TABLE[method].requires_stages)
            raise ConfigError(f"{method} needs the {stages} stages before export", "export.methods")
    check_name(section.name.format(name=config.name), "export.name")
    if section.version != "auto":
        parse_semver(section.version, "export.version")
    if section.methods is not None:
        allowed = [m for m in METHODS if m not in gold_methods()]
        bad = [m for m in section.methods if m not in allowed]
        if bad or not section.methods:
            raise ConfigError(f"{bad or 'none'}: give methods of {', '.join(allowed)} (gold-free)", "export.methods")
    elif not [m for m in exported_methods(config) if decision_ready(config, m)]:
        raise ConfigError(
            "no gold-free method to export: add one to evaluate.methods or set export.methods", "evaluate.methods"
        )
    if "evaluate" not in config.stages:
        check_method_params(config)
