"""Typed settings end to end (issue 44): a method's options are validated once per source — the recipe when it loads,
then only a source that sets new values (an ``evaluate.params`` file, the run's study) — and the evaluate stage runs
the very settings instances the recipe load made. Counted with DTR's ``tau``: every DTRSettings.validate is one."""

from __future__ import annotations

import json

import pytest

from tests.recipe_overrides import run_overrides
from workbench.methods.dtr.settings import DTRSettings
from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration


@pytest.fixture
def validations(monkeypatch):
    """Every DTRSettings.validate call (the settings it validated), in order."""
    seen: list[DTRSettings] = []
    validate = DTRSettings.validate

    def counted(self: DTRSettings) -> DTRSettings:
        seen.append(self)
        return validate(self)

    monkeypatch.setattr(DTRSettings, "validate", counted)
    return seen


def _overrides(tmp_path, lm_dir, encoder_dir, *extra):
    return run_overrides(
        tmp_path,
        lm_dir,
        f"embedder.model={encoder_dir}",
        "stages=[build_data,evaluate]",
        "evaluate.limit=2",
        "evaluate.max_new_tokens=4",
        "evaluate.methods=[no_rag,dtr]",
        "evaluate.options={dtr: {tau: 0.5, pseudo_max_tokens: 8, n_per_path: 2, k: 2, dense_index: pooled, "
        "dense_pool: 4}}",
        "retrieval.k=2",
        *extra,
        per_template=20,
    )


def test_dtr_tau_is_validated_once_per_source(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, validations):
    import workbench.methods.dtr.method as dtr_method

    built = []
    original = dtr_method.DTR.__init__

    def recording(self, tools, settings=DTRSettings(), retriever=None):  # noqa: B008 (frozen)
        built.append(settings)
        original(self, tools, settings, retriever)

    loaded = load_recipe("evaluate", _overrides(tmp_path, tiny_lm_long_dir, tiny_encoder_dir))
    assert [s.tau for s in validations] == [0.5]  # the recipe, at load
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dtr_method.DTR, "__init__", recording)
        run_recipe(loaded)
    assert len(validations) == 1  # evaluate ran what the load made: nothing validated again
    assert built == [validations[0]] and built[0] is validations[0]  # the very instance, typed from the load on
    summary = json.loads((tmp_path / "run" / "stages" / "evaluate" / "summary.json").read_text())
    assert summary["options"]["dtr"]["tau"] == 0.5  # the run records what the user wrote

    # a parameters file is a new source: its values are validated once, when evaluate lays them over the recipe's
    from workbench.bundle.learned import evaluated_config

    params = tmp_path / "dtr.json"
    params.write_text(json.dumps({"method": "dtr", "options": {"tau": 2.0}}))
    validations.clear()
    config = load_recipe(
        "evaluate", _overrides(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, f"evaluate.params=[{params}]")
    ).config
    laid = evaluated_config(config, "dtr", None)
    assert laid.settings.tau == 2.0 and laid.given["tau"] == 2.0 and laid.given["k"] == 2
    assert [s.tau for s in validations] == [0.5, 2.0]  # the recipe at load, the file's values when laid over it
    assert evaluated_config(config, "no_rag", None) is config.evaluate.method_config("no_rag")  # no new value
