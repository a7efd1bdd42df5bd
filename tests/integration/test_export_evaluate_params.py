"""Export = evaluate (issue 27, item 3): ``evaluate.params`` files (study parameters, D²-RAG's τ) reach the bundle
exactly as they reach the evaluate stage, and bench-runtime's end-to-end parity checks the bundle's settings against
the ones evaluate ran with."""

from __future__ import annotations

import json

import pytest

from tests.bundle_run import build_tiny_run

pytestmark = pytest.mark.integration

UTILITY = {"kind": "learned", "model": "logistic_utility", "requires_gold": False}


@pytest.fixture(scope="module")
def params_run(tmp_path_factory, tiny_lm_long_dir, tiny_encoder_dir):
    """The tiny pipeline with a D²-RAG parameters file (τ, α_pos) and a DTR one (τ) in evaluate.params."""
    tmp = tmp_path_factory.mktemp("params-run")
    d2rag, dtr = tmp / "d2rag.json", tmp / "dtr.json"
    d2rag.write_text(json.dumps({"method": "d2rag", "options": {"alpha_pos": 0.5}, "tau": 0.37, "utility": UTILITY}))
    dtr.write_text(json.dumps({"method": "dtr", "options": {"tau": 123.0}}))
    build_tiny_run(
        tmp,
        tiny_lm_long_dir,
        tiny_encoder_dir,
        "evaluate.methods=[no_rag,dtr,d2rag]",
        f"evaluate.params=[{d2rag},{dtr}]",
    )
    return tmp


def test_the_bundle_runs_the_parameters_evaluate_ran(params_run):
    run = params_run / "run"
    manifest = json.loads((params_run / "bundles" / "tiny" / "1.0.0" / "manifest.json").read_text())
    assert manifest["decision"]["tau"] == 0.37 and manifest["decision"]["rule"] == "study"
    assert manifest["methods"]["d2rag"]["options"]["alpha_pos"] == 0.5
    assert manifest["methods"]["dtr"]["options"]["tau"] == 123.0
    summary = json.loads((run / "stages" / "evaluate" / "summary.json").read_text())
    assert summary["d2rag_tau"] == 0.37
    assert summary["options"] == {m: manifest["methods"][m]["options"] for m in ("no_rag", "dtr", "d2rag")}


def test_bench_runtime_parity_covers_the_parameters(params_run):
    from workbench.stages.bench_runtime import _end_to_end

    bundle = params_run / "bundles" / "tiny" / "1.0.0"
    parity = _end_to_end(params_run / "run", bundle, ["no_rag", "dtr", "d2rag"], 0)
    assert all(row["same_options"] is True for row in parity.values())
    assert parity["d2rag"]["same_tau"] is True
    for row in parity.values():
        assert row["same_text"] == row["same_retrieval"] == row["questions"] == 3
