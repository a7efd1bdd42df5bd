"""The fit_utility stage end to end on the tiny model: ΔSePer-labelled pairs, the saved predictor, the report."""

from __future__ import annotations

import json

import pytest

from workbench.core.errors import ConfigError
from workbench.methods.utility import UTILITY_FEATURES, UtilityPredictor
from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration


def _overrides(tmp_path, model, *extra):
    return [
        f"generator.model={model}",
        f"run_dir={tmp_path}/run",
        f"report.dir={tmp_path}/report",
        "tracker=none",
        "threads=0",
        "data.max_per_template=20",
        "stages=[build_data,fit_utility,report]",
        "fit_utility.limit=6",
        "fit_utility.folds=2",
        "fit_utility.samples=2",
        "fit_utility.max_new_tokens=3",
        "fit_utility.k=2",
        "fit_utility.batch_questions=4",
        *extra,
    ]


def test_fit_utility_saves_a_predictor_pairs_and_a_report_section(tmp_path, tiny_lm_long_dir):
    import datasets

    run_recipe(load_recipe("evaluate", _overrides(tmp_path, tiny_lm_long_dir)))
    stage = tmp_path / "run" / "stages" / "fit_utility"
    predictor = UtilityPredictor.from_dict(json.loads((stage / "utility.json").read_text()))
    assert predictor.is_fitted and predictor.n_train_ == 6 and predictor.feature_names == UTILITY_FEATURES
    pairs = datasets.load_from_disk(str(stage / "pairs"))
    assert len(pairs) == 6 and all(len(ids) == 2 for ids in pairs["retrieved_ids"])
    assert all(-1.0 <= v <= 1.0 for v in pairs["delta_seper_s"]) and all(v == v for v in pairs["oof_prediction"])
    assert all(v == v for v in pairs["nll_context"])  # every pair has its with-context answer's NLL
    summary = json.loads((stage / "summary.json").read_text())
    assert summary["usable"] == 6 and set(summary["coefficients"]) == set(UTILITY_FEATURES)
    assert sum(sum(row.values()) for row in summary["oof"]["confusion"].values()) == 6
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## D²-RAG utility predictor" in report and (tmp_path / "report" / "utility_fit.png").is_file()


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("fit_utility.folds=1", "fit_utility.folds"),
        ("fit_utility.limit=1", "fit_utility.limit"),
        ("fit_utility.split=nope", "fit_utility.split"),
        ("fit_utility.k=0", "fit_utility.k"),
    ],
)
def test_fit_utility_refuses_bad_settings(tmp_path, tiny_lm_long_dir, override, match):
    with pytest.raises(ConfigError, match=match):
        run_recipe(load_recipe("evaluate", _overrides(tmp_path, tiny_lm_long_dir, override)))
