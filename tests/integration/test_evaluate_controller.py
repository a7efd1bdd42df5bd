"""The evaluate stage with InSemRAG's controller on a second model (issue 14): ``insemrag`` (prompted, on the
answering model) and ``insemrag_distilled`` (on another tiny model given as ``controller_model``) side by side; the
controller's LM calls count in the run's costs, and the summary notes which controller each ran on."""

from __future__ import annotations

import json

import pytest

from tests.recipe_overrides import run_overrides
from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration


def test_evaluate_runs_the_prompted_and_the_distilled_controller_side_by_side(
    tmp_path, tiny_lm_long_dir, tiny_encoder_dir
):
    import datasets

    from tests.bundle_run import write_corpus
    from tests.tiny_models import build_tiny_llama

    student = build_tiny_llama(tmp_path / "student", seed=1, max_positions=4096)
    corpus = write_corpus(tmp_path / "corpus.jsonl", n=40)
    small = "k1: 4, candidates_per_channel: 4, k: 2, max_rounds: 1, chunk_tokens: 32, enrich_tokens: 4, "
    small += "elements_tokens: 4, follow_up_tokens: 4"
    overrides = run_overrides(
        tmp_path,
        tiny_lm_long_dir,
        f"embedder.model={tiny_encoder_dir}",
        f"data.corpus={corpus}",
        "stages=[build_data,evaluate]",
        "evaluate.limit=2",
        "evaluate.max_new_tokens=4",
        "evaluate.methods=[insemrag,insemrag_distilled]",
        f"evaluate.options={{insemrag: {{{small}}}, insemrag_distilled: {{{small}, controller_model: {student}}}}}",
        per_template=5,
    )
    run_recipe(load_recipe("evaluate", overrides))
    stage = tmp_path / "run" / "stages" / "evaluate"
    summary = json.loads((stage / "summary.json").read_text())
    assert summary["notes"] == {
        "insemrag": "prompted controller, the answering model",
        "insemrag_distilled": f"distilled controller, model {student}",
    }
    traces = datasets.load_from_disk(str(stage / "traces")).to_list()
    assert [r["method"] for r in traces] == ["insemrag"] * 2 + ["insemrag_distilled"] * 2
    for record in traces:
        steps = json.loads(record["trace"])["steps"]
        controller = steps[0]["detail"]["controller"]
        distilled = record["method"] == "insemrag_distilled"
        assert controller["name"] == ("distilled" if distilled else "prompted")
        assert controller["answering_model"] is (not distilled)
        # every controller decision is a counted LM call, on whichever model it ran; one final answer
        assert record["lm_calls"] == sum(s["cost"]["lm_calls"] for s in steps) > 1
        assert [s["name"] for s in steps].count("generate") == 1
