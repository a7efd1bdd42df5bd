"""The adaptive-retrieval protocol recipe (AdaRAGUE's comparison): it loads with the protocol's contents, and its own
stage list runs end to end at toy sizes on the tiny models — a synthetic collection (a random model is never right),
real calibrate / classify with every router kind, evaluate with the seeds, FLARE and DRAGIN, the transfer stage on the
open-answer family, and one report holding the three tables."""

from __future__ import annotations

import json

import pytest

from tests.bundle_run import FEATURES, run_overrides, run_with_synthetic_collect
from workbench.recipe import load_recipe

pytestmark = pytest.mark.integration

RECIPE = "adaptive-retrieval"
SEEDS = {"dtr", "dense_rag", "d2rag", "insemrag"}
BASELINES = {"no_rag", "standard_rag", "oracle"}
OPEN = ["cloze", "description", "two_hop"]


def test_the_recipe_holds_the_protocol():
    """Seeds, FLARE, DRAGIN and the baselines (No-RAG gives in-accuracy its label); all four classifier kinds; the
    transfer stage on the other template family, before the report; BCa resamples everywhere they are drawn."""
    config = load_recipe(RECIPE).config
    assert set(config.evaluate.methods) == SEEDS | BASELINES | {"flare", "dragin"}
    assert set(config.classify.kinds) == set(config.classify.single_feature_kinds) == {"logistic", "mlp", "knn", "tree"}
    stages = list(config.stages)
    assert stages.index("classify") < stages.index("evaluate") < stages.index("transfer") < stages.index("report")
    assert config.transfer.templates == OPEN and not set(OPEN) & set(config.data.templates)
    assert config.transfer.bootstrap >= 1000 and config.classify.router_bootstrap >= 1000


def test_the_recipe_runs_its_stages_at_toy_sizes(tmp_path, tiny_lm_long_dir, tiny_encoder_dir):
    config = load_recipe(RECIPE).config
    methods = ",".join(config.evaluate.methods)
    overrides = run_overrides(
        tmp_path,
        tiny_lm_long_dir,
        tiny_encoder_dir,
        f"stages=[{','.join(config.stages)}]",  # the recipe's own stage list (the quickstart overrides name theirs)
        "classify.kinds=[logistic,knn,tree]",  # the MLP costs a Lightning fit per seed and fold; unit tests train it
        "classify.single_feature_kinds=[logistic,knn,tree]",
        "classify.router_search=forward",
        f"evaluate.methods=[{methods}]",
        "evaluate.limit=1",
        "transfer.limit=4",
        "transfer.bootstrap=50",
        "classify.router_bootstrap=100",
    )
    run_with_synthetic_collect(RECIPE, overrides)
    stages = tmp_path / "run" / "stages"
    summary = json.loads((stages / "evaluate" / "summary.json").read_text())["methods"]
    assert set(summary) == set(config.evaluate.methods)
    for row in summary.values():  # every method gets the protocol's columns
        assert {"in_accuracy", "retrieval_calls", "lm_calls"} <= set(row)
    routing = {row["router"]: row for row in json.loads((stages / "classify" / "routing.json").read_text())["rows"]}
    selection = json.loads((stages / "classify" / "selection.json").read_text())
    grid = [f"{short}({feature})" for short in ("LR", "kNN", "Tree") for feature in FEATURES]
    assert set(grid) <= set(routing) and set(selection["single_feature_thresholds"]) == set(grid)
    for name in grid:  # each a router of its own: a τ, a decision per question, the protocol's columns
        assert 0.0 <= routing[name]["retrieval_rate"] <= 1.0 and routing[name]["in_accuracy"] is not None
        assert selection["single_feature_thresholds"][name]["tau"] is not None
    transfer = json.loads((stages / "transfer" / "transfer.json").read_text())
    assert transfer["conditions"]["shifted"]["rows"] == 4
    assert set(transfer["conditions"]["shifted"]["templates"]) <= set(OPEN)
    report = (tmp_path / "report" / "report.md").read_text()
    assert all(f"| {m} |" in report for m in ("flare", "dragin", "d2rag"))
    assert "| kNN |" in report and "| Tree |" in report and "| LR |" in report
    assert "## Calibration transfer" in report
