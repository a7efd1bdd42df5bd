"""The 'export' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView


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
        "methods in the bundle (null: evaluate.methods without the gold-using oracle and d2rag_oracle)", None
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
        " d2rag answer)",
        False,
    )


def exported_methods(config: RecipeView) -> list[str]:
    """The methods the export stage bundles (its explicit list, else the gold-free evaluate methods)."""
    from workbench.bundle.integrity import gold_methods

    if config.export.methods is not None:
        return list(config.export.methods)
    methods = [m for m in config.evaluate.methods if m not in gold_methods()]
    return [*methods, "d2rag"] if "d2rag_oracle" in config.evaluate.methods and "d2rag" not in methods else methods


def check_d2rag_params(config: RecipeView) -> None:
    """evaluate.params → evaluate / export: a D²-RAG parameters file that goes into a bundle was tuned with a gold-free
    utility (its study recorded how the utility was made), and sets no option the run's utility classifier makes
    inert."""
    from workbench.bundle.learned import read_params, tuned_gold_free
    from workbench.stages.settings.fit_utility import INERT_UNDER_CLASSIFIER, classifier_utility

    exported = "export" in config.stages and "d2rag" in exported_methods(config)
    for path in config.evaluate.params:
        try:
            params = read_params(Path(path))
        except ConfigError as exc:
            raise ConfigError(f"{exc.where}: {exc.what}", "evaluate.params") from None
        if params["method"] != "d2rag":
            continue
        if exported and not tuned_gold_free(params):
            raise ConfigError(
                f"{path}: d2rag's parameters were tuned with the gold-using oracle utility (or the file does not say "
                "how its utility was made), and a bundle runs the gold-free one: rerun the study with fit_utility",
                "evaluate.params",
            )
        inert = [name for name in INERT_UNDER_CLASSIFIER if name in params["options"]]
        if inert and classifier_utility(config):
            raise ConfigError(
                f"{path} sets d2rag's {inert[0]}, which changes nothing with fit_utility.model: classifier (the "
                "classifier decides the class): drop it from the file",
                "evaluate.params",
            )


def check(config: RecipeView) -> None:
    """export's load check: a valid bundle name and version, gold-free methods, at least one method to bundle, D²-RAG
    only with its calibrators and classifier, and D²-RAG parameters tuned gold-free (when evaluate does not run:
    evaluate checks them then, :func:`check_d2rag_params`)."""
    from workbench.bundle.integrity import gold_methods
    from workbench.bundle.schema import check_name, parse_semver
    from workbench.methods.registry import METHODS

    section = config.export
    decision = "calibrate" in config.stages and "classify" in config.stages  # else export leaves d2rag out
    if "d2rag" in (section.methods or []) and not decision:
        raise ConfigError("d2rag needs the calibrate and classify stages before export", "export.methods")
    check_name(section.name.format(name=config.name), "export.name")
    if section.version != "auto":
        parse_semver(section.version, "export.version")
    if section.methods is not None:
        allowed = [m for m in METHODS if m not in gold_methods()]
        bad = [m for m in section.methods if m not in allowed]
        if bad or not section.methods:
            raise ConfigError(f"{bad or 'none'}: give methods of {', '.join(allowed)} (gold-free)", "export.methods")
    elif not [m for m in exported_methods(config) if m != "d2rag" or decision]:
        raise ConfigError(
            "no gold-free method to export: add one to evaluate.methods or set export.methods", "evaluate.methods"
        )
    if "evaluate" not in config.stages:
        check_d2rag_params(config)
