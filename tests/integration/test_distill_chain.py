"""Issue 14 end to end on the tiny models: teacher traces (distill_data) → a LoRA student (distill) → InSemRAG with
``controller: distilled`` reading the run's own distill output in the evaluate stage, next to the prompted
controller, and one report with every section."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_distill_data import OPTIONS, data_overrides
from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration

SMALL = "k1: 4, candidates_per_channel: 4, k: 2, max_rounds: 1, chunk_tokens: 32"


def test_the_distilled_controller_is_trained_and_answers_through_the_controller_option(
    tmp_path, tiny_lm_long_dir, tiny_encoder_dir
):
    overrides = data_overrides(
        tmp_path,
        tiny_lm_long_dir,
        tiny_encoder_dir,
        "stages=[build_data,distill_data,distill,evaluate,export,report]",
        f"export.dir={tmp_path}/bundles",
        "distill_data.limit=2",
        "distill_data.heldout_limit=1",
        OPTIONS,
        f"distill.base_model={tiny_lm_long_dir}",
        "distill.lora_r=4",
        "distill.lora_alpha=8",
        "distill.epochs=1",
        "distill.max_length=256",
        "distill.eval_limit=2",
        "evaluate.limit=1",
        "evaluate.max_new_tokens=4",
        "evaluate.methods=[insemrag,insemrag_distilled]",
        f"evaluate.options={{insemrag: {{{SMALL}}}, insemrag_distilled: {{{SMALL}}}}}",
        threads=1,
    )
    run_recipe(load_recipe("evaluate", overrides))
    run = tmp_path / "run" / "stages"
    adapter = json.loads((run / "distill" / "adapter.json").read_text())
    assert adapter["kind"] == "lora_adapter" and adapter["base_model"] == str(tiny_lm_long_dir)
    import datasets

    traces = datasets.load_from_disk(str(run / "evaluate" / "traces"))
    by_method = {row["method"]: json.loads(row["trace"]) for row in traces}
    assert set(by_method) == {"insemrag", "insemrag_distilled"}
    prompted = by_method["insemrag"]["steps"][0]["detail"]["controller"]
    distilled = by_method["insemrag_distilled"]["steps"][0]["detail"]["controller"]
    assert prompted["name"] == "prompted" and distilled["name"] == "distilled"
    assert distilled["model"] != prompted["model"]  # the merged student, not the answering model
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Distilled controller" in report and "insemrag_distilled" in report
    # the bundle carries the adapter and its runtime answers with the distilled controller (JSON + safetensors only)
    from workbench import load_bundle

    bundle = next((tmp_path / "bundles").glob("*/*/manifest.json")).parent
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["controller_adapter"]["file"] == "learned/adapter.json"
    assert (bundle / "learned" / "adapter.safetensors").is_file()
    for name in ("adapter_config.json", "adapter_model.safetensors", "README.md"):  # peft opens learned/ (issue 29)
        assert name in (bundle / "learned" / "README.md").read_text() and f"learned/{name}" in manifest["files"]
    rt = load_bundle(bundle)
    answer = rt.answer("Which river flows through Paris?", "insemrag_distilled")
    controller = answer.trace["steps"][0]["detail"]["controller"]
    assert answer.lm_calls > 1 and controller["name"] == "distilled"
    assert controller["model"] == str(bundle / "learned" / "adapter.json")  # the bundle's copy, not the run's
