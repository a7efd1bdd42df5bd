"""A D²-RAG study records how its utility was made (issue 27, item 2): the run's fitted, gold-free utility, in
``params/d2rag.json`` and ``best_params.json`` — what export reads before it takes the parameters."""

from __future__ import annotations

import json

import pytest

from tests.bundle_run import run_overrides, run_with_synthetic_collect

pytestmark = pytest.mark.integration


def test_a_d2rag_study_records_its_gold_free_utility(tmp_path, tiny_lm_long_dir, tiny_encoder_dir):
    from workbench.methods.d2rag.pipeline import tuned_gold_free

    overrides = run_overrides(
        tmp_path,
        tiny_lm_long_dir,
        tiny_encoder_dir,
        "stages=[build_data,collect,calibrate,classify,fit_utility,study]",
        "evaluate.methods=[no_rag,d2rag]",
        "study.methods=[d2rag]",
        "study.space={d2rag: {tau: {low: 0, high: 1}}}",
        "study.limit=2",
        "study.n_trials=3",
    )
    run_with_synthetic_collect("study", overrides)
    stage = tmp_path / "run" / "stages" / "study"
    record = json.loads((stage / "params" / "d2rag.json").read_text())
    best = json.loads((stage / "best_params.json").read_text())
    expected = {"kind": "learned", "model": "logistic_utility", "requires_gold": False}
    assert record["utility"] == best["d2rag_utility"] == expected
    assert tuned_gold_free(record) and tuned_gold_free(best, "d2rag_utility")
