"""No oracle inside a study (issue 27, item 2): D²-RAG is tuned with the gold-free utility its bundle runs — a recipe
without fit_utility is refused at load, the study stage refuses it too, the objective never builds the oracle — and
the study records how the utility was made, so export (and the recipe, at load) refuse parameters tuned otherwise."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from workbench.core.errors import ConfigError
from workbench.methods.d2rag.pipeline import tuned_gold_free, utility_record
from workbench.methods.seper.utility import UtilityPredictor
from workbench.methods.seper.utility_classifier import UtilityClassifier
from workbench.recipe import load_recipe

LEARNED = {"kind": "learned", "model": "logistic_utility", "requires_gold": False}


def test_a_d2rag_study_without_fit_utility_is_refused_at_load():
    with pytest.raises(ConfigError, match=r"study\.methods: tuning d2rag needs the fit_utility stage before study"):
        load_recipe("study", ["stages=[build_data,collect,calibrate,classify,study,report]"])
    only_dtr = ["stages=[build_data,study]", "study.methods=[dtr]", "study.space={}"]
    assert load_recipe("study", only_dtr).config.study.methods == ["dtr"]


def test_the_study_records_a_gold_free_utility_and_refuses_none():
    with pytest.raises(ConfigError, match="needs the fit_utility stage"):
        utility_record(SimpleNamespace(utility=None))  # the run has no fitted utility: never the oracle
    assert utility_record(SimpleNamespace(utility=UtilityClassifier())) == LEARNED
    ridge = utility_record(SimpleNamespace(utility=UtilityPredictor()))
    assert ridge == {"kind": "learned", "model": "ridge_utility", "requires_gold": False}
    assert tuned_gold_free({"utility": LEARNED}) and tuned_gold_free({"d2rag_utility": LEARNED}, "d2rag_utility")
    assert not tuned_gold_free({"utility": {"kind": "oracle", "requires_gold": True}})
    assert not tuned_gold_free({})  # a study that did not record it


def test_the_objective_never_builds_d2rag_with_the_oracle(monkeypatch):
    from workbench.tuning import objective  # binds build_method and evaluate_built at its top
    from workbench.tuning.objective import MethodObjective

    seen = {}

    def build(name, tools, options, learned, **kwargs):
        seen.update(kwargs)
        return object()

    monkeypatch.setattr(objective, "build_method", build)
    monkeypatch.setattr(objective, "evaluate_built", lambda *a, **k: SimpleNamespace(records=[]))
    MethodObjective(None, "d2rag", [], [], learned=SimpleNamespace(tau=0.5)).run({"alpha_pos": 0.5})
    assert seen["utility_fallback"] == "none"  # what a bundle runs without a fitted utility


def _run(tmp_path, best, params=()):
    """A finished run as export sees it: its config and its study's best_params.json."""
    config = SimpleNamespace(evaluate=SimpleNamespace(params=[str(p) for p in params]))
    return SimpleNamespace(config=config, json=lambda stage, file: best if stage == "study" else None)


@pytest.mark.parametrize(
    ("best", "refused"),
    [
        ({"methods": {"d2rag": {"alpha_pos": 0.5}}, "d2rag_tau": 0.4, "d2rag_utility": LEARNED}, False),
        ({"methods": {"dtr": {"tau": 1.0}}}, False),  # no d2rag study
        (None, False),  # no study
        ({"methods": {"d2rag": {}}, "d2rag_tau": 0.4}, True),  # not recorded: a study from before the record
        (
            {"methods": {"d2rag": {}}, "d2rag_tau": 0.4, "d2rag_utility": {"kind": "oracle", "requires_gold": True}},
            True,
        ),
    ],
)
def test_export_refuses_a_study_of_d2rag_tuned_with_the_oracle(tmp_path, best, refused):
    from workbench.bundle.export import _check_tuned_gold_free

    run = _run(tmp_path, best)
    if refused:
        with pytest.raises(ConfigError, match="tuned with the gold-using oracle utility"):
            _check_tuned_gold_free(run, ["no_rag", "d2rag"])
    else:
        _check_tuned_gold_free(run, ["no_rag", "d2rag"])
    _check_tuned_gold_free(run, ["no_rag", "dtr"])  # no d2rag in the bundle: nothing to refuse


def test_export_and_the_recipe_refuse_a_params_file_tuned_with_the_oracle(tmp_path):
    from workbench.bundle.export import _check_tuned_gold_free

    untold = tmp_path / "d2rag.json"
    untold.write_text(json.dumps({"method": "d2rag", "options": {"alpha_pos": 0.5}, "tau": 0.3}))
    told = tmp_path / "d2rag-learned.json"
    told.write_text(json.dumps({"method": "d2rag", "options": {"alpha_pos": 0.5}, "tau": 0.3, "utility": LEARNED}))
    with pytest.raises(ConfigError, match=r"d2rag\.json: d2rag's parameters were tuned with the gold-using oracle"):
        _check_tuned_gold_free(_run(tmp_path, None, [untold]), ["d2rag"])
    _check_tuned_gold_free(_run(tmp_path, None, [told]), ["d2rag"])
    # at load, where the recipe exports d2rag (the quickstart does)
    with pytest.raises(ConfigError, match=r"evaluate\.params: .*tuned with the gold-using oracle"):
        load_recipe("quickstart", [f"evaluate.params=[{untold}]"])
    assert load_recipe("quickstart", [f"evaluate.params=[{told}]"]).config.evaluate.params == [str(told)]
    # a file setting what the run's utility classifier makes inert is refused too
    inert = tmp_path / "d2rag-inert.json"
    inert.write_text(json.dumps({"method": "d2rag", "options": {"tau_pos": 0.2}, "utility": LEARNED}))
    with pytest.raises(ConfigError, match="sets d2rag's tau_pos, which changes nothing"):
        load_recipe("quickstart", [f"evaluate.params=[{inert}]"])
