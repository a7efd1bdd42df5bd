"""The transfer stage end to end on the tiny models: a synthetic collection (in distribution), real build_data /
calibrate / classify, the shifted questions collected for real by the collect stage's code, transfer.json with both
conditions, the report section; and bad transfer settings refused at recipe load."""

from __future__ import annotations

import json

import pytest

from tests.bundle_run import run_overrides, run_with_synthetic_collect
from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe

pytestmark = pytest.mark.integration

STAGES = "stages=[build_data,collect,calibrate,classify,transfer,report]"
OPEN = {"cloze", "description", "two_hop"}


@pytest.fixture(scope="module")
def transfer_run(tmp_path_factory, tiny_lm_long_dir, tiny_encoder_dir):
    tmp = tmp_path_factory.mktemp("transfer")
    overrides = run_overrides(
        tmp, tiny_lm_long_dir, tiny_encoder_dir, STAGES, "transfer.limit=6", "transfer.bootstrap=50"
    )
    run_with_synthetic_collect("quickstart", overrides)
    return tmp, overrides


def test_transfer_json_has_both_conditions(transfer_run):
    tmp, _ = transfer_run
    record = json.loads((tmp / "run" / "stages" / "transfer" / "transfer.json").read_text())
    assert set(record["conditions"]) == {"in_distribution", "shifted"}
    assert record["split"] == "test" and set(record["shifted_templates"]) == OPEN
    assert record["decision"]["kind"] in ("router", "classifier") and record["decision"]["features"]
    in_dist, shifted = record["conditions"]["in_distribution"], record["conditions"]["shifted"]
    assert in_dist["rows"] == 52 and shifted["rows"] == 6  # the synthetic collection: all 52 test questions
    assert set(in_dist["templates"]) <= {"choice_cloze", "choice_nationality", "choice_country"}
    assert set(shifted["templates"]) <= OPEN
    for condition in (in_dist, shifted):
        assert set(condition["features"]) == {"confidence", "entropy", "dtr_nll"}
        routing = condition["routing"]
        assert 0.0 <= routing["retrieval_rate"] <= 1.0
        assert routing["routed_minus_always"] == pytest.approx(routing["routed"] - routing["always_rag"])
        assert len(condition["p_correct"]) == condition["rows"] == len(condition["labels"])
        assert condition["ood"]["questions"] == condition["rows"] and condition["ood"]["interval"] is not None
    assert in_dist["decision"]["auroc"] is not None and in_dist["intervals"]["decision_auroc"][0] is not None
    assert record["shift"]["routed"] == pytest.approx(shifted["routing"]["routed"] - in_dist["routing"]["routed"])


def test_the_shifted_questions_are_the_other_family_on_the_same_articles(transfer_run):
    import datasets

    from workbench.data.article_splits import assign_splits
    from workbench.data.dataset_store import load_saved_dataset_dict
    from workbench.data.wikiqa import load_articles

    tmp, overrides = transfer_run
    config = load_recipe("quickstart", overrides).config
    articles = load_articles()
    split = assign_splits(
        articles, seed=config.seed, fractions=config.data.fractions, ood_topics=config.data.ood_topics
    )
    test_articles = {doc for doc, name in split.items() if name == "test"}
    rows = datasets.load_from_disk(str(tmp / "run" / "stages" / "transfer" / "shifted")).to_list()
    assert len(rows) == 6 and {r["template"] for r in rows} <= OPEN
    assert all(r["doc_ids"] and set(r["doc_ids"]) <= test_articles for r in rows)
    qa = load_saved_dataset_dict(tmp / "run" / "stages" / "build_data" / "qa")
    in_docs = {d for m in qa["test"]["metadata"] for d in json.loads(m)["doc_ids"]}
    assert in_docs <= test_articles  # both conditions ask about the test split's articles
    for row in rows:  # collected by the collect stage's code: its features, labels and costs
        assert {"confidence", "entropy", "dtr_nll", "correct_contains", "rag_contains", "stat_cost"} <= set(row)


def test_the_report_has_the_transfer_section(transfer_run):
    tmp, _ = transfer_run
    report = (tmp / "report" / "report.md").read_text()
    assert "## Calibration transfer" in report and "| routed − Always-RAG |" in report
    assert "| feature | AUROC in | AUROC shifted |" in report
    assert (tmp / "report" / "transfer.png").is_file()


@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        ("transfer.templates=[cloze,bogus]", "transfer.templates", "bogus"),
        ("transfer.templates=[cloze,choice_cloze]", "transfer.templates", "choice_cloze"),
        ("transfer.split=calib", "transfer.split", "in-sample"),
        ("transfer.split=val", "transfer.split", "not among collect.splits"),
        ("transfer.in_task_folds=1", "transfer.in_task_folds", "at least 2 folds"),
    ],
)
def test_bad_transfer_settings_fail_at_load(override, key, words):
    with pytest.raises(ConfigError) as info:
        load_recipe("quickstart", [STAGES, override])
    message = str(info.value)
    assert key in message and words in message and "\n" not in message
