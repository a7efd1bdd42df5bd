"""The fit_utility stage end to end on the tiny model: ΔSePer-labelled pairs, the saved predictor, the report."""

from __future__ import annotations

import json

import pytest

from tests.recipe_overrides import run_overrides
from workbench.core.errors import ConfigError
from workbench.methods.seper.utility import UTILITY_CLASSES as CLASSES
from workbench.methods.seper.utility import UTILITY_FEATURES, UtilityPredictor
from workbench.methods.seper.utility_classifier import UtilityClassifier
from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration


def _overrides(tmp_path, model, *extra):
    return run_overrides(
        tmp_path,
        model,
        "stages=[build_data,fit_utility,report]",
        "fit_utility.limit=6",
        "fit_utility.folds=2",
        "fit_utility.samples=2",
        "fit_utility.max_new_tokens=3",
        "fit_utility.k=2",
        "fit_utility.batch_questions=4",
        *extra,
        per_template=20,
    )


@pytest.mark.parametrize("model", ["classifier", "ridge"])
def test_fit_utility_saves_a_model_pairs_and_a_report_section(tmp_path, tiny_lm_long_dir, model):
    import datasets

    from workbench.methods.learned import load_learned

    run_recipe(load_recipe("evaluate", _overrides(tmp_path, tiny_lm_long_dir, f"fit_utility.model={model}")))
    stage = tmp_path / "run" / "stages" / "fit_utility"
    fitted = load_learned(stage / "utility.json", expect={"logistic_utility", "ridge_utility"})
    assert isinstance(fitted, UtilityClassifier if model == "classifier" else UtilityPredictor)
    assert fitted.is_fitted and fitted.n_train_ == 6 and fitted.feature_names == UTILITY_FEATURES
    pairs = datasets.load_from_disk(str(stage / "pairs"))
    assert len(pairs) == 6 and all(len(ids) == 2 for ids in pairs["retrieved_ids"])
    assert all(-1.0 <= v <= 1.0 for v in pairs["delta_seper_s"])
    assert set(pairs["oof_class"]) <= {"noisy", "neutral", "relevant"}
    if model == "ridge":
        assert all(v == v for v in pairs["oof_prediction"])
    else:
        assert all(abs(a + b + c - 1) < 1e-6 for a, b, c in zip(*(pairs[f"oof_p_{k}"] for k in CLASSES), strict=True))
    assert all(v == v for v in pairs["nll_context"])  # every pair has its with-context answer's NLL
    summary = json.loads((stage / "summary.json").read_text())
    assert summary["usable"] == 6 and summary["model"] == model
    assert sum(sum(row.values()) for row in summary["oof"]["confusion"].values()) == 6
    assert sum(summary["oof"]["majority"]["predicted"].values()) == 6
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## D²-RAG utility predictor" in report and (tmp_path / "report" / "utility_fit.png").is_file()
    assert "| majority class (" in report and "three-class agreement" in report


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("fit_utility.folds=1", "fit_utility.folds"),
        ("fit_utility.limit=1", "fit_utility.limit"),
        ("fit_utility.split=nope", "fit_utility.split"),
        ("fit_utility.k=0", "fit_utility.k"),
        ("fit_utility.model=forest", "fit_utility.model"),
        ("fit_utility.dev_fraction=1.0", "fit_utility.dev_fraction"),
    ],
)
def test_fit_utility_refuses_bad_settings(tmp_path, tiny_lm_long_dir, override, match):
    with pytest.raises(ConfigError, match=match):
        run_recipe(load_recipe("evaluate", _overrides(tmp_path, tiny_lm_long_dir, override)))
