"""The 'classify' stage's settings: its section of the recipe and its own load check."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from workbench.core.config import doc
from workbench.core.errors import ConfigError
from workbench.core.settings import RecipeView


@dataclass
class ClassifySection:
    """The 'classify' stage: LR / MLP / k-NN / tree retrieval-decision classifiers, threshold τ, ONNX export, routing
    table."""

    kinds: list[Literal["logistic", "mlp", "knn", "tree"]] = doc(
        "classifier kinds to train (the best mean PRR is chosen): logistic, mlp, knn (k nearest neighbours), tree "
        "(a decision tree)",
        ["logistic", "mlp"],
    )
    single_feature_kinds: list[Literal["logistic", "mlp", "knn", "tree"]] = doc(
        "classifier kinds also trained on each single calibrated feature (AdaRAGUE's estimator × classifier grid): "
        "one routing-table row per kind and feature, e.g. kNN(entropy); [] adds none",
        [],
    )
    seeds: list[int] = doc("training seeds per kind", [0, 1, 2], minimum=0)
    val_fraction: float = doc(
        "share of the fit split held out for validation (MLP early stopping, model and seed choice; τ too when "
        "tau_from is val)",
        0.3,
    )
    tau_from: Literal["oof", "val"] = doc(
        "where τ is chosen: oof — out-of-fold predictions over the whole fit split (each fold predicted by the "
        "chosen kind and seed refitted on the other folds), not the predictions that stopped the MLP and chose the "
        "model and the seed; val — the validation split's predictions (it then does all four jobs)",
        "oof",
    )
    tau_folds: int = doc("tau_from oof: folds of the fit split", 5, minimum=2)
    threshold_rule: Literal["max_f1", "target_rate", "max_routed_score"] = doc(
        "how τ is chosen: max F1 of the retrieve class, a target retrieval rate, max routed QA score",
        "max_routed_score",
    )
    target_rate: float = doc("target_rate: the retrieval rate to reach", 0.5)
    routed_score: Literal["em", "f1", "contains"] = doc("max_routed_score: which QA score to maximise", "contains")
    logistic_c: float = doc("logistic regression: inverse L2 strength C", 1.0)
    mlp_hidden_sizes: list[int] = doc("MLP hidden layer widths", [32])
    mlp_dropout: float = doc("MLP dropout after each hidden layer", 0.1)
    mlp_learning_rate: float = doc("MLP AdamW learning rate", 0.001)
    mlp_weight_decay: float = doc("MLP AdamW weight decay", 0.0001)
    mlp_max_epochs: int = doc("MLP epoch cap", 200)
    mlp_batch_size: int = doc("MLP mini-batch size", 32)
    mlp_patience: int = doc("MLP early stopping: epochs without validation-loss improvement", 10, minimum=0)
    knn_neighbors: int = doc("k-NN: neighbours per decision (scikit-learn's default)", 5, minimum=1)
    tree_max_depth: int = doc("decision tree: deepest level (1 to 32: the ONNX graph unrolls each)", 5, minimum=1)
    tree_min_samples_leaf: int = doc("decision tree: fewest fit-split questions in a leaf", 10, minimum=1)
    router_search: Literal["forward", "study", "none"] = doc(
        "the router the run ships (D²-RAG's Stage 1; docs/routing.md): forward — greedy forward selection by AUROC "
        "gain per cost, then the pick rule; study — that plus an Optuna multi-objective study over feature subsets, "
        "classifier kind, inputs, calibrator, τ and cascades; none — no search: the chosen classifier over every "
        "feature",
        "forward",
    )
    pick: Literal["cheapest_within", "best_quality", "max_quality_under"] = doc(
        "the rule that picks the router the run ships among those found (docs/routing.md): cheapest_within — the "
        "cheapest within router_delta of Always-RAG's routed score; best_quality — the highest routed score; "
        "max_quality_under — the highest routed score within the pick_max_* budget(s). A router is preferred to "
        "Always-RAG for a higher score only when its 90% paired interval (fit split, out of fold) lies above 0",
        "cheapest_within",
    )
    router_delta: float = doc(
        "cheapest_within's ε: the most routed score (out of fold on the fit split) the router may lose against "
        "Always-RAG (0.01 = one point); also what 'pays for itself' allows on the evaluation split",
        0.01,
    )
    pick_max_retrieval_rate: float | None = doc(
        "max_quality_under: the highest retrieval rate allowed (e.g. 0.5: retrieve for at most half the questions)",
        None,
    )
    pick_max_tokens: float | None = doc(
        "max_quality_under: the most LM tokens per question allowed (prompt + generated + scored, retrieval included)",
        None,
    )
    pick_max_seconds: float | None = doc(
        "max_quality_under: the most seconds per question allowed (measured; the retriever's latency included)", None
    )
    cost_unit: Literal["tokens", "seconds", "lm_calls"] = doc(
        "what 'cheapest' counts: LM tokens (prompt + generated + scored), measured seconds (retriever latency "
        "included) or LM calls, per question",
        "tokens",
    )
    retrieval_seconds: float | None = doc(
        "retrieval cost model: the retriever's latency per question in seconds (e.g. a web search); null: as "
        "measured by collect",
        None,
    )
    retrieval_tokens: float | None = doc(
        "retrieval cost model: prompt tokens the retrieved context adds to the answer's prompt; null: as measured",
        None,
    )
    router_kinds: list[Literal["logistic", "mlp", "knn", "tree"]] = doc(
        "router study: classifier kinds searched (the MLP trains with Lightning per fold: slow; knn and tree take "
        "classify.knn_* / tree_* settings)",
        ["logistic"],
    )
    router_inputs: list[Literal["calibrated", "raw"]] = doc(
        "router study: classifier inputs searched (raw: the imputed raw features, which the classifier standardises)",
        ["calibrated", "raw"],
    )
    router_calibrators: list[Literal["auto", "isotonic", "centered_isotonic", "platt", "beta"]] = doc(
        "router study: calibrator kinds searched for calibrated inputs (auto: chosen per feature as calibrate.kind "
        "auto chooses); must hold calibrate.kind, the kind of the forward selection's routers the study starts from",
        ["auto", "isotonic", "centered_isotonic", "platt", "beta"],
    )
    router_trials: int = doc("router study: Optuna trials", 100)
    router_cascades: bool = doc("router study: also search two-step (cascade) routers, measured on the front", True)
    router_bootstrap: int = doc("bootstrap resamples of the evaluation split's intervals", 2000)


PICK_KEYS = {
    "rule": "classify.pick",
    "epsilon": "classify.router_delta",
    "max_retrieval_rate": "classify.pick_max_retrieval_rate",
    "max_tokens": "classify.pick_max_tokens",
    "max_seconds": "classify.pick_max_seconds",
}
"""The pick rule's parameters as recipe keys (what its errors name)."""


def pick_rule_of(section: Any) -> Any:
    """The checked :class:`~workbench.routing.pick.PickRule` of a ``classify`` section; ConfigError naming the
    recipe key otherwise."""
    from workbench.routing.pick import pick_rule

    return pick_rule(
        section.pick,
        epsilon=section.router_delta,
        max_retrieval_rate=section.pick_max_retrieval_rate,
        max_tokens=section.pick_max_tokens,
        max_seconds=section.pick_max_seconds,
        names=PICK_KEYS,
    )


def knn_config_of(section: Any) -> Any:
    """The k-NN settings of a ``classify`` section (:class:`~workbench.classify.knn.KNNConfig`); ConfigError naming
    the recipe key when out of range."""
    from workbench.classify.knn import KNNConfig

    with _recipe_keys({"knn.n_neighbors": "classify.knn_neighbors"}):
        return KNNConfig(n_neighbors=section.knn_neighbors)


def tree_config_of(section: Any) -> Any:
    """The tree settings of a ``classify`` section (:class:`~workbench.classify.tree.TreeConfig`); ConfigError
    naming the recipe key when out of range."""
    from workbench.classify.tree import TreeConfig

    keys = {"tree.max_depth": "classify.tree_max_depth", "tree.min_samples_leaf": "classify.tree_min_samples_leaf"}
    with _recipe_keys(keys):
        return TreeConfig(max_depth=section.tree_max_depth, min_samples_leaf=section.tree_min_samples_leaf)


@contextmanager
def _recipe_keys(keys: dict[str, str]) -> Iterator[None]:
    """Re-raise a config class's ConfigError under the recipe key it comes from (``keys``: its where → the key)."""
    try:
        yield
    except ConfigError as exc:
        raise ConfigError(exc.what, keys.get(exc.where or "", exc.where)) from None


def check(config: RecipeView) -> None:
    """classify's load check: collect answers with retrieval (the routing table) and collects a split besides
    calibrate.fit_split to evaluate on; the router search's settings are in range."""
    if "rag" not in config.collect.labels:
        raise ConfigError("classify's routing table needs answers with retrieval: add rag", "collect.labels")
    if not [s for s in config.collect.splits if s != config.calibrate.fit_split]:
        raise ConfigError(
            f"classify evaluates on a collected split besides calibrate.fit_split {config.calibrate.fit_split!r}: "
            "add one",
            "collect.splits",
        )
    section = config.classify
    pick_rule_of(section)
    knn_config_of(section)
    tree_config_of(section)
    for key in ("retrieval_seconds", "retrieval_tokens"):
        value = getattr(section, key)
        if value is not None and not (isinstance(value, int | float) and value >= 0):
            raise ConfigError(f"must be a number >= 0 or null, got {value!r}", f"classify.{key}")
    for key in ("router_kinds", "router_inputs", "router_calibrators"):
        values = getattr(section, key)
        if not values or len(set(values)) != len(values):
            raise ConfigError(f"name at least one, each once, got {values!r}", f"classify.{key}")
    if section.router_search == "study" and config.calibrate.kind not in section.router_calibrators:
        raise ConfigError(
            f"must hold calibrate.kind {config.calibrate.kind!r}: the study starts from forward selection's routers",
            "classify.router_calibrators",
        )
    if section.router_trials < 1:
        raise ConfigError("must be >= 1", "classify.router_trials")
    if section.router_bootstrap < 100:
        raise ConfigError("must be >= 100", "classify.router_bootstrap")
