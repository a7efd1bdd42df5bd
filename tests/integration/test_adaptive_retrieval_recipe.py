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
TOY_SIZES = ["evaluate.limit=1", "transfer.limit=4", "transfer.bootstrap=50", "classify.router_bootstrap=100"]
"""One question per method, four shifted questions, few resamples: the toy runs' sizes."""


def test_the_recipe_holds_the_protocol():
    """Seeds, FLARE, DRAGIN and the baselines (No-RAG gives decision accuracy its label); all four classifier kinds; the
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
        *TOY_SIZES,
    )
    run_with_synthetic_collect(RECIPE, overrides)
    stages = tmp_path / "run" / "stages"
    summary = json.loads((stages / "evaluate" / "summary.json").read_text())["methods"]
    assert set(summary) == set(config.evaluate.methods)
    for row in summary.values():  # every method gets the protocol's columns, its quality means an interval each
        assert {"decision_accuracy", "retrieval_calls", "lm_calls"} <= set(row)
        assert set(row["intervals"]) == {"em", "f1", "contains", "decision_accuracy"}
        assert all(bounds == [None, None] for bounds in row["intervals"].values())  # one question: no interval
    routing = {row["router"]: row for row in json.loads((stages / "classify" / "routing.json").read_text())["rows"]}
    selection = json.loads((stages / "classify" / "selection.json").read_text())
    grid = [f"{short}({feature})" for short in ("LR", "kNN", "Tree") for feature in FEATURES]
    assert set(grid) <= set(routing) and set(selection["single_feature_thresholds"]) == set(grid)
    for name in grid:  # each a router of its own: a τ, a decision per question, the protocol's columns
        assert 0.0 <= routing[name]["retrieval_rate"] <= 1.0 and routing[name]["decision_accuracy"] is not None
        assert selection["single_feature_thresholds"][name]["tau"] is not None
    transfer = json.loads((stages / "transfer" / "transfer.json").read_text())
    assert transfer["conditions"]["shifted"]["rows"] == 4
    assert set(transfer["conditions"]["shifted"]["templates"]) <= set(OPEN)
    # a random model never answers an open question: one class, so no in-task router (said so, not faked)
    assert transfer["routers"]["rows"] == [] and "rarer class" in transfer["routers"]["skipped"]
    report = (tmp_path / "report" / "report.md").read_text()
    assert all(f"| {m} |" in report for m in ("flare", "dragin", "d2rag"))
    assert "| kNN |" in report and "| Tree |" in report and "| LR |" in report
    assert "## Calibration transfer" in report
    assert "### Routers on cloze, description, two_hop questions: fitted in-task vs transferred" in report
    assert "No in-task routers: the shifted questions hold 0 of their rarer class: no in-task router" in report
    assert "each with its 90% BCa bootstrap interval (2,000 resamples of the questions) in brackets" in report
    # no export: what ships is classify's pick at classify's τ, with the routing table's row of it as its figure
    short = {"logistic": "LR", "knn": "kNN", "tree": "Tree"}
    pick = "Router" if selection.get("router") else short[selection["chosen"]]
    rate = f"retrieval rate {routing[pick]['retrieval_rate']:.2f}"
    assert f"held out (`test`): {rate}" in report and "no held-out figure" not in report
    _check_the_router_table_on_the_collected_test_questions(load_recipe(RECIPE, overrides).config, stages, routing)


def _check_the_router_table_on_the_collected_test_questions(config, stages, routing):
    """The transfer stage's router table on the run's own test questions (two classes, where the shifted ones have
    one): its transferred routers are classify's (the same decisions: the routing table's retrieval rates, the
    refitted single-feature grid included), and every router also gets an in-task row with a paired interval."""
    from types import SimpleNamespace

    import datasets

    from workbench.methods.learned import load_learned
    from workbench.stages.calibrate.run import binary_labels
    from workbench.stages.transfer.run import router_table

    rows = datasets.load_from_disk(str(stages / "collect" / "test")).to_list()
    meta = json.loads((stages / "calibrate" / "summary.json").read_text())
    labels = binary_labels(rows, meta["label"], meta["label_threshold"], "test")
    calibrators = load_learned(stages / "calibrate" / "calibrators.json", expect={"calibrator_set"})
    inputs = {stage: stages / stage for stage in ("calibrate", "classify")}
    ctx = SimpleNamespace(config=config, inputs=inputs)
    table = router_table(ctx, rows, calibrators, labels)
    assert table["skipped"] is None and table["unfit"] == {} and table["folds"] == config.transfer.in_task_folds
    by_name = {row["router"]: row for row in table["rows"]}
    routers = [*FEATURES, "LR", "kNN", "Tree", *(f"{s}({f})" for s in ("LR", "kNN", "Tree") for f in FEATURES)]
    assert list(by_name) == ["No-RAG", "Always-RAG", "Oracle", *routers]
    for name in routers:
        row = by_name[name]
        assert row["transferred"]["retrieval_rate"] == pytest.approx(routing[name]["retrieval_rate"])
        assert row["transferred"]["decision_accuracy"] == pytest.approx(routing[name]["decision_accuracy"])
        low, high = row["intervals"]["routed"]
        assert low is None or low <= row["difference"]["routed"] <= high


def test_the_other_direction_is_the_recipe_with_the_families_swapped(tmp_path, tiny_lm_long_dir, tiny_encoder_dir):
    """The open-answer task as the run's own (methods and routers on it), the either-or family as the transfer test:
    the recipe's header command, at toy sizes."""
    either_or = ["choice_cloze", "choice_nationality", "choice_country"]
    overrides = run_overrides(
        tmp_path,
        tiny_lm_long_dir,
        tiny_encoder_dir,
        f"stages=[{','.join(load_recipe(RECIPE).config.stages)}]",
        f"data.templates=[{','.join(OPEN)}]",
        f"transfer.templates=[{','.join(either_or)}]",
        "classify.kinds=[logistic,knn]",
        "classify.single_feature_kinds=[logistic]",
        "classify.router_search=forward",
        "evaluate.methods=[no_rag,standard_rag,flare,dragin]",
        *TOY_SIZES,
    )
    run_with_synthetic_collect(RECIPE, overrides)
    stages = tmp_path / "run" / "stages"
    assert set(json.loads((stages / "evaluate" / "summary.json").read_text())["methods"]) == {
        "no_rag", "standard_rag", "flare", "dragin"
    }  # fmt: skip
    transfer = json.loads((stages / "transfer" / "transfer.json").read_text())
    assert set(transfer["conditions"]["shifted"]["templates"]) <= set(either_or)
    assert transfer["conditions"]["shifted"]["rows"] == 4
    report = (tmp_path / "report" / "report.md").read_text()
    assert "### Routers on choice_cloze, choice_nationality, choice_country questions" in report
