"""Export = evaluate (issue 27, item 3): ``evaluate.params`` files (study parameters, D²-RAG's τ) reach the bundle
exactly as they reach the evaluate stage, and bench-runtime's end-to-end parity checks the bundle's settings against
the ones evaluate ran with. Issue 41: a file edited after evaluate ran is refused at export (the digests differ), the
manifest records who set each value and on which questions, and parameters tuned on the held-out questions are
refused."""

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
    dtr.write_text(json.dumps({"method": "dtr", "options": {"tau": 99.0}}))
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
    assert manifest["methods"]["dtr"]["options"]["tau"] == 99.0
    summary = json.loads((run / "stages" / "evaluate" / "summary.json").read_text())
    assert summary["d2rag_tau"] == 0.37
    assert summary["options"] == {m: manifest["methods"][m]["options"] for m in ("no_rag", "dtr", "d2rag")}


def test_bench_runtime_parity_covers_the_parameters(params_run):
    from workbench.bench.runtime.run import _end_to_end

    bundle = params_run / "bundles" / "tiny" / "1.0.0"
    parity = _end_to_end(params_run / "run", bundle, ["no_rag", "dtr", "d2rag"], 0)
    assert all(row["same_options"] is True for row in parity.values())
    assert parity["d2rag"]["same_tau"] is True
    for row in parity.values():
        assert row["same_text"] == row["same_retrieval"] == row["questions"] == 3


# ------------------------------------------------------- issue 41: what ships is what evaluate ran, on what it was fit
@pytest.fixture
def rewritten(params_run):
    """Rewrite the run's D²-RAG parameters file for one test (restored after): ``rewrite(payload)``."""
    path = params_run / "d2rag.json"
    original = path.read_text()

    def rewrite(payload: dict) -> None:
        path.write_text(json.dumps(payload))

    yield rewrite
    path.write_text(original)


def _export(params_run, tmp_path):
    from workbench.bundle.export import export_run

    return export_run(params_run / "run", name="tiny", root=tmp_path, archive=False)


def test_export_refuses_a_parameters_file_edited_after_evaluate_ran(params_run, rewritten, tmp_path):
    from workbench.core.errors import ConfigError

    rewritten({"method": "d2rag", "options": {"alpha_pos": 0.5}, "tau": 0.5, "utility": UTILITY})
    with pytest.raises(ConfigError) as err:
        _export(params_run, tmp_path)
    message = str(err.value)
    assert message.startswith("export: d2rag: the bundle would ship τ = 0.5 but evaluate ran τ = 0.37 (parameters")
    assert "re-run the recipe" in message and not any(tmp_path.iterdir())  # refused before anything was written


def test_the_manifest_records_the_evaluated_digests_and_who_set_each_value(params_run, tmp_path):
    result = _export(params_run, tmp_path)
    provenance = result.manifest["provenance"]
    summary = json.loads((params_run / "run" / "stages" / "evaluate" / "summary.json").read_text())
    assert provenance["evaluated"] == {m: summary["parameters_sha256"][m] for m in result.manifest["methods"]}
    fitted, held = provenance["fitted"], provenance["held_out"]
    # a hand-written parameters file is the user's choice: fitted on nothing
    assert fitted["decision.tau"] == {
        "set_by": "params",
        "split": None,
        "questions": None,
        "ids_sha256": None,
        "source": str(params_run / "d2rag.json"),
    }
    assert fitted["d2rag.alpha_pos"]["set_by"] == "params" and fitted["d2rag.alpha_neg"]["set_by"] == "default"
    assert fitted["dtr.tau"]["set_by"] == "params"
    calibrated = json.loads((params_run / "run" / "stages" / "calibrate" / "calibrated.json").read_text())
    calib = fitted["decision.calibrators"]
    assert calib["split"] == "calib" and calib["questions"] == len(calibrated["calib"]["id"])
    assert fitted["utility"] == {**fitted["utility"], "set_by": "fit_utility", "split": "calib", "questions": 6}
    assert held["evaluate"]["split"] == "test" and held["evaluate"]["questions"] == 3
    assert held["routing"]["split"] == "test" and held["utility"]["out_of_fold"] is True
    # τ came from a parameters file, so the shipped row is classify's predictions routed again at it
    routing = result.manifest["metrics"]["routing"]
    assert routing["shipped_by"] == "params" and routing["chosen"].endswith("at τ = 0.370 (params)")
    assert held["decision"]["measured_by"] == "export"


def test_export_refuses_parameters_tuned_on_its_held_out_questions(params_run, rewritten, tmp_path):
    import datasets

    from workbench.bundle.provenance import question_record
    from workbench.core.errors import ConfigError

    traces = datasets.load_from_disk(str(params_run / "run" / "stages" / "evaluate" / "traces"))
    tuned_on_test = question_record("test", sorted(set(traces["id"])))
    payload = {"method": "d2rag", "options": {"alpha_pos": 0.5}, "tau": 0.37, "utility": UTILITY}
    rewritten({**payload, "fitted_on": tuned_on_test})
    # the evaluate questions are among the routing table's (both test): the first figure that shares them is named
    shared = r"^export: decision.tau was fitted on 3 of the \d+ questions the routing figures report as held-out"
    with pytest.raises(ConfigError, match=shared + r" \(fitted on split 'test', measured on 'test'\)"):
        _export(params_run, tmp_path)
    rewritten({**payload, "study": "someone-d2rag", "trial": 4})  # a study's file that recorded no questions
    with pytest.raises(ConfigError, match=r"was written by a study that did not record the questions it tuned on"):
        _export(params_run, tmp_path)
