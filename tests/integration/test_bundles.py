"""Export → load → infer on a real (tiny) run: byte-identical re-exports, the runtime answering exactly as the
evaluation stage did, resumable infer files, the import boundary and refused model swaps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.bundle_run import build_tiny_run
from workbench.bundle.export import export_run
from workbench.cli import app
from workbench.core.errors import AssetError, ConfigError
from workbench.runtime import load_bundle
from workbench.uncertainty.calculators import prompt_fingerprints

pytestmark = pytest.mark.integration

METHODS = ("no_rag", "standard_rag", "dtr", "dense_rag", "d2rag", "insemrag")
GOLD_FREE = {"d2rag_utility": {"kind": "learned", "model": "logistic_utility", "requires_gold": False}}
"""How a study records a D²-RAG tuned with the run's fitted utility (export refuses any other)."""


def wb(*args: str) -> subprocess.CompletedProcess:
    """The CLI as a user runs it (one-line errors, exit status 2)."""
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_lm_long_dir, tiny_encoder_dir):
    """The tiny pipeline, run once: build_data → collect (synthetic) → … → evaluate → export."""
    tmp = tmp_path_factory.mktemp("bundle-run")
    result = build_tiny_run(tmp, tiny_lm_long_dir, tiny_encoder_dir)
    return tmp, result


def _bundle(tiny_run) -> Path:
    tmp, _ = tiny_run
    return tmp / "bundles" / "tiny" / "1.0.0"


def test_export_stage_writes_a_bundle_with_the_runs_learned_bytes(tiny_run):
    tmp, result = tiny_run
    assert result.stage("export").summary["bundle"] == "tiny 1.0.0"
    root = _bundle(tiny_run)
    manifest = json.loads((root / "manifest.json").read_text())
    assert tuple(manifest["methods"]) == tuple(sorted(METHODS))  # d2rag_oracle (gold) left out
    stages = tmp / "run" / "stages"
    # the decision is the router classify's search picked: its own calibrators, classifier and ONNX graph
    router = json.loads((stages / "classify/selection.json").read_text())["router"]
    for shipped, made in (("calibrators.json", "calibrators"), ("classifier.json", "classifier")):
        assert (root / "learned" / shipped).read_bytes() == (stages / "classify" / router["files"][made]).read_bytes()
    # the bundle's ONNX file is the whole decision (raw features in), built from the router's parts
    import onnx

    graph = onnx.load(str(root / "learned" / "classifier.onnx"))
    assert [i.name for i in graph.graph.input] == ["raw_features"]
    assert manifest["decision"]["features"] == router["spec"]["features"]
    assert [f["name"] for f in manifest["features"]] == router["spec"]["features"]
    assert (root / "learned/utility.json").read_bytes() == (stages / "fit_utility/utility.json").read_bytes()
    assert manifest["utility"]["kind"] == "learned" and manifest["decision"]["rule"].startswith("router pick")
    collected = json.loads((stages / "collect/metadata.json").read_text())
    assert manifest["stats"]["settings"] == collected["settings"] and manifest["stats"]["prompts"]
    assert (
        manifest["stats"]["prompt_groups"] == collected["prompt_groups"] == {"answer": prompt_fingerprints()["answer"]}
    )
    assert manifest["models"]["generator"]["weights_sha256"] and manifest["corpus"]["passages"] == 300
    assert all(f["requires_gold"] is False for f in manifest["features"])
    assert "d2rag_oracle (reads the gold answer" in (root / "README.md").read_text()
    assert {"plots/routing.png", "plots/methods.png"} <= set(manifest["files"])


def test_the_bundle_says_how_each_calibrator_was_chosen(tiny_run):
    from workbench.calibration import CalibratorChoice

    manifest = json.loads((_bundle(tiny_run) / "manifest.json").read_text())
    calibrators = json.loads((_bundle(tiny_run) / "learned" / "calibrators.json").read_text())
    assert manifest["decision"]["calibrator"] == "auto" and set(calibrators["choices"]) == set(calibrators["features"])
    chosen = {f: CalibratorChoice.from_dict(r).chosen for f, r in calibrators["choices"].items()}
    assert chosen == {f: calibrators["calibrators"][f]["kind"] for f in calibrators["features"]}
    (note,) = [n for n in manifest["notes"] if "chosen per feature by out-of-fold log loss" in n]
    assert all(f"{f} {k}" in note for f, k in chosen.items())


def test_re_export_is_byte_identical_and_versions_move_only_with_content(tiny_run):
    tmp, _ = tiny_run
    root = _bundle(tiny_run)
    before = {p.relative_to(root.parent): p.read_bytes() for p in root.parent.rglob("*") if p.is_file()}
    again = export_run(tmp / "run", name="tiny", root=tmp / "bundles")
    assert again.version == "1.0.0" and again.unchanged
    after = {p.relative_to(root.parent): p.read_bytes() for p in root.parent.rglob("*") if p.is_file()}
    assert after == before  # every file, the manifest and the archive included
    fewer = export_run(tmp / "run", name="tiny", root=tmp / "bundles", methods=["no_rag", "d2rag"])
    assert fewer.version == "1.0.1" and not fewer.unchanged
    with pytest.raises(ConfigError, match="exists with other content"):
        export_run(tmp / "run", name="tiny", version="1.0.0", root=tmp / "bundles", methods=["no_rag"])
    with pytest.raises(ConfigError, match="read the gold answer"):
        export_run(tmp / "run", name="tiny", root=tmp / "bundles", methods=["d2rag_oracle"])


def test_a_studys_best_parameters_and_a_distilled_adapter_are_exported(tiny_run, tmp_path):
    import shutil

    import numpy as np

    from workbench.core.artifact_io import read_artifact, write_artifact

    tmp, _ = tiny_run
    run = Path(shutil.copytree(tmp / "run", tmp_path / "run"))
    manifest = json.loads((run / "manifest.json").read_text())
    for stage, name, payload in (
        ("study", "best_params.json", {"methods": {"dtr": {"tau": 0.5}, "d2rag": {"alpha_pos": 0.7}}, **GOLD_FREE}),
        ("distill", "_payload.json", None),
    ):
        out = run / "stages" / stage
        out.mkdir()
        if payload is not None:
            (out / name).write_text(json.dumps(payload))
        (out / "_stage.json").write_text(json.dumps({"key": f"k-{stage}"}))
        manifest["stages"][stage] = {"key": f"k-{stage}"}
    weights = {"base_model.layers.0.q_proj.lora_A.weight": np.ones((2, 8), dtype=np.float32)}
    write_artifact(run / "stages/distill/adapter.json", {"kind": "lora_adapter", "version": 1, "r": 2}, weights)
    peft_files = {"adapter_config.json": b'{"peft_type": "LORA"}', "adapter_model.safetensors": b"x", "README.md": b"#"}
    for file_name, data in peft_files.items():  # the stage's peft directory (tests/unit/backends/test_peft_dir.py)
        (run / "stages/distill" / file_name).write_bytes(data)
    (run / "manifest.json").write_text(json.dumps(manifest))
    # the run's evaluate ran without these parameters: the export refuses to ship what evaluate did not run (issue 41)
    with pytest.raises(ConfigError, match=r"^export: dtr: the bundle would ship tau = 0.5 but evaluate ran tau = None"):
        export_run(run, name="studied", root=tmp_path / "bundles")
    del manifest["stages"]["evaluate"]  # without an evaluate stage there is no record to disagree with
    (run / "manifest.json").write_text(json.dumps(manifest))
    result = export_run(run, name="studied", root=tmp_path / "bundles")
    methods = result.manifest["methods"]
    fitted = result.manifest["provenance"]["fitted"]
    assert fitted["dtr.tau"]["set_by"] == "study" and fitted["dtr.tau"]["split"] == "val"  # the recipe's study split
    assert fitted["controller_adapter"]["set_by"] == "distill" and fitted["controller_adapter"]["split"] == "train"
    dtr = {"pseudo_max_tokens": 16, "n_per_path": 2, "k": 2, "tau": 0.5}  # the recipe's options + the study's τ
    assert methods["dtr"]["options"] == dtr and methods["d2rag"]["options"] == {"alpha_pos": 0.7}
    assert result.manifest["controller_adapter"]["kind"] == "lora_adapter"
    payload, tensors = read_artifact(result.path / "learned" / "adapter.json")
    assert payload["r"] == 2 and np.array_equal(next(iter(tensors.values())), np.ones((2, 8)))
    assert "learned/adapter.safetensors" in result.manifest["files"]
    import hashlib

    for file_name, data in peft_files.items():  # copied beside adapter.json, listed and digest-checked (issue 29)
        assert result.manifest["files"][f"learned/{file_name}"]["sha256"] == hashlib.sha256(data).hexdigest()
    rt = load_bundle(result.path)
    assert rt.method_options["dtr"] == dtr


def test_the_runtime_answers_exactly_as_the_evaluation_stage_did(tiny_run):
    import datasets

    tmp, _ = tiny_run
    traces = datasets.load_from_disk(str(tmp / "run" / "stages" / "evaluate" / "traces")).to_list()
    rt = load_bundle(tmp / "bundles" / "tiny" / "tiny-1.0.0.tar.gz", {"extract_dir": str(tmp / "unpacked")})
    for method in METHODS:
        rows = [r for r in traces if r["method"] == method]
        answers = rt.answer_many([r["question"] for r in rows], method)
        assert [a.text for a in answers] == [r["prediction"] for r in rows], method
        assert [a.retrieved for a in answers] == [r["retrieved"] for r in rows], method
        assert [a.trace["passages"] for a in answers] == [json.loads(r["trace"])["passages"] for r in rows], method
        if method == "d2rag":
            decided = [next(s for s in json.loads(r["trace"])["steps"] if s["name"] == "decide") for r in rows]
            assert [a.p_correct for a in answers] == [d["detail"]["p_correct"] for d in decided]
            assert all(a.utility_class in ("closed", "relevant", "neutral", "noisy") for a in answers)
            assert all(a.features and set(a.features) == set(rt.policy.features) for a in answers)
    one = rt.answer(rows[0]["question"], "standard_rag")
    assert one.passages and one.passages[0]["title"] and one.lm_calls == 1 and one.tokens > 0


def test_the_runtime_imports_no_training_dependency(tiny_run):
    code = f"""
import sys
from workbench import load_bundle
rt = load_bundle({str(_bundle(tiny_run))!r})
rt.answer("Which river flows through Paris?", "d2rag")
rt.answer("Which river flows through Paris?", "dtr")
banned = ["lightning", "pytorch_lightning", "optuna", "deepspeed", "wandb", "sklearn", "sentence_transformers",
          "workbench.stages", "workbench.recipe", "workbench.bundle.export"]
print([m for m in banned if m in sys.modules])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stderr[-2000:]


def test_a_generator_with_other_weights_is_refused_unless_allowed(tiny_run, tmp_path):
    from tests.tiny_models import build_tiny_llama

    other = build_tiny_llama(tmp_path / "other", seed=7, max_positions=4096)
    rt = load_bundle(_bundle(tiny_run), {"generator": str(other)})
    with pytest.raises(AssetError, match="allow_model_mismatch"):
        rt.answer("Who wrote Hamlet?", "no_rag")
    allowed = load_bundle(_bundle(tiny_run), {"generator": str(other), "allow_model_mismatch": True})
    answer = allowed.answer("Who wrote Hamlet?", "no_rag")
    assert any("learned on another model" in note for note in answer.notes)


def test_a_user_corpus_is_used_and_noted(tiny_run, tmp_path):
    corpus = tmp_path / "mine.jsonl"
    corpus.write_text(json.dumps({"doc_id": "d1", "title": "Seine", "text": "The Seine flows through Paris."}) + "\n")
    rt = load_bundle(_bundle(tiny_run), {"corpus": str(corpus)})
    answer = rt.answer("Which river flows through Paris?", "standard_rag")
    assert [p["id"] for p in answer.passages] == ["d1#0"] and any("replaces" in n for n in answer.notes)


def test_only_question_strings_reach_the_methods(tiny_run):
    from workbench.core.errors import DataError

    rt = load_bundle(_bundle(tiny_run))
    with pytest.raises(DataError, match="only question strings"):
        rt.answer_many([{"question": "q", "answers": ["gold"]}], "no_rag")
    seen = []
    method = rt.method("no_rag")
    original = method.answer_many
    method.answer_many = lambda examples: seen.extend(examples) or original(examples)
    rt.answer("Who wrote Hamlet?", "no_rag")
    assert [set(e) for e in seen] == [{"id", "question"}]


def test_infer_cli_answers_and_resumes_without_duplicates(tiny_run, tmp_path):
    bundle = str(_bundle(tiny_run))
    runner = CliRunner()
    single = runner.invoke(app, ["infer", "--bundle", bundle, "--method", "d2rag", "Who wrote Hamlet?"])
    assert single.exit_code == 0, single.output
    assert "Q: Who wrote Hamlet?" in single.output and "P(correct)" in single.output
    questions = tmp_path / "q.jsonl"
    rows = [{"id": f"q{i}", "question": f"Question number {i}?", "answers": ["gold"]} for i in range(5)]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    output = tmp_path / "a.jsonl"
    args = ["infer", "--bundle", bundle, "--method", "no_rag", "--input", str(questions), "--output", str(output)]
    first = runner.invoke(app, [*args, "--batch-size", "2"])
    assert first.exit_code == 0, first.output
    lines = output.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [f"q{i}" for i in range(5)]
    assert all("gold" not in line for line in lines)
    output.write_text("\n".join(lines[:2]) + "\n" + lines[2][:15])  # interrupted while writing the third answer
    second = runner.invoke(app, args)
    assert second.exit_code == 0 and "3 answered, 2 already" in second.output, second.output
    assert [json.loads(line)["id"] for line in output.read_text().splitlines()] == [f"q{i}" for i in range(5)]
    third = runner.invoke(app, args)
    assert "0 answered, 5 already" in third.output
    questions.write_text(questions.read_text() + '{"id": "q1", "question": "again?"}\n')
    dup = wb(*args)
    assert dup.returncode == 2 and f"error: {questions}:6: id 'q1' appears twice" in dup.stderr, dup.stderr


def test_export_and_bundles_cli(tiny_run, tmp_path):
    tmp, _ = tiny_run
    runner = CliRunner()
    out = runner.invoke(
        app, ["export", str(tmp / "run"), "--dir", str(tmp_path), "--name", "cli", "--version", "2.1.0"]
    )
    assert out.exit_code == 0 and "bundle cli 2.1.0 written" in out.output, out.output
    listed = runner.invoke(app, ["bundles", "--dir", str(tmp_path), "--verify"])
    assert listed.exit_code == 0 and "cli" in listed.output and "verified" in listed.output
    bad = wb("export", str(tmp_path / "nope"), "--dir", str(tmp_path))
    assert bad.returncode == 2 and "not a run directory" in bad.stderr and len(bad.stderr.splitlines()) == 1
    bad_version = wb("export", str(tmp / "run"), "--dir", str(tmp_path), "--version", "1.2")
    assert bad_version.returncode == 2 and "not a semantic version" in bad_version.stderr
    refused = wb("infer", "--bundle", str(tmp_path / "cli" / "2.1.0"), "--method", "oracle", "Who?")
    assert refused.returncode == 2 and "'oracle' is not in this bundle" in refused.stderr


def test_serve_answers_over_http_as_the_runtime_does(tiny_run):
    import httpx

    from workbench.serve import run_load, serve_process

    bundle = _bundle(tiny_run)
    direct = load_bundle(bundle).answer("Who wrote Hamlet?", "d2rag")
    with serve_process(bundle, args=["--max-batch", "2"]) as url:
        health = httpx.get(f"{url}/health").json()
        assert health["status"] == "ok" and health["bundle"] == "tiny" and "d2rag" in health["methods"]
        body = httpx.post(f"{url}/answer", json={"question": "Who wrote Hamlet?", "method": "d2rag"}, timeout=60)
        answer = body.json()["answers"][0]
        assert body.status_code == 200 and answer["text"] == direct.text and answer["p_correct"] == direct.p_correct
        too_many = httpx.post(f"{url}/answer", json={"questions": ["a?", "b?", "c?"]})
        assert too_many.status_code == 422
        gold = httpx.post(f"{url}/answer", json={"question": "Who wrote Hamlet?", "answers": ["Shakespeare"]})
        assert gold.status_code == 422  # a gold field never reaches the runtime
        load = run_load(url, [{"question": "Who wrote Hamlet?", "method": "no_rag"}], total=8, concurrency=4)
        assert load["errors"] == 0 and load["requests"] == 8


def test_the_bundle_carries_reference_distributions_of_its_calibration_split(tiny_run):
    """Issue 45 item 3: export writes monitoring/reference.json (schema 1.6) from the calibrate stage's fit split —
    the decision features' raw values, the shipped decision's P(correct) on them, its retrieval rate — and serve's
    /drift reads it from the verified bundle."""
    import httpx

    from workbench.bundle.files import BundleFiles
    from workbench.monitoring.reference import read_reference
    from workbench.serve import serve_process

    tmp, _ = tiny_run
    root = _bundle(tiny_run)
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["schema_version"] == "1.7" and manifest["monitoring"]["file"] in manifest["files"]
    reference = read_reference(BundleFiles(root, manifest), manifest, str(root))
    stages = tmp / "run" / "stages"
    split = json.loads((stages / "calibrate/summary.json").read_text())["fit_split"]
    rows = json.loads((stages / "calibrate/calibrated.json").read_text())[split]
    features = manifest["decision"]["features"]
    assert reference.split == split == manifest["monitoring"]["split"] and reference.rows == len(rows["id"])
    assert {f"feature:{f}" for f in features} | {"p_correct", "retrieval"} <= set(reference.series)
    for feature in features:  # every calibration row's raw value (fewer than 1000: the whole sorted sample)
        assert list(reference.series[f"feature:{feature}"].sample) == pytest.approx(sorted(rows["raw"][feature]))
    runtime = load_bundle(root)
    p = runtime.policy.p_correct([[rows["raw"][f][i] for f in features] for i in range(len(rows["id"]))])
    assert list(reference.series["p_correct"].sample) == pytest.approx(sorted(p.tolist()))
    retrieval = reference.series["retrieval"].proportions[1]
    assert retrieval == pytest.approx(float((p < manifest["decision"]["tau"]).mean()))
    # the OOD flag's series: every fit question the profile holds, each checked leave-one-out by calibrate
    whole = json.loads((stages / "calibrate/ood_reference.json").read_text())
    assert whole["split"] == split and reference.series["ood"].n == whole["questions"] >= len(rows["id"])
    assert reference.series["ood"].proportions[1] == pytest.approx(whole["flagged"] / whole["questions"])
    with serve_process(root, args=["--max-batch", "2"]) as url:
        httpx.post(f"{url}/answer", json={"question": "Who wrote Hamlet?", "method": "d2rag"}, timeout=60)
        drift = httpx.get(f"{url}/drift", timeout=60).json()
    assert drift["reference"] is True and drift["answers"] == 1 and drift["reference_split"] == split
    assert drift["series"][f"feature:{features[0]}"]["count"] == 1 and not drift["alarm"]


def test_a_re_run_with_another_report_directory_keeps_the_version_and_the_bytes(tiny_run, tmp_path):
    import shutil

    tmp, _ = tiny_run
    run = Path(shutil.copytree(tmp / "run", tmp_path / "run"))
    first = export_run(run, name="same", root=tmp_path / "bundles")
    config = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(config.replace(f"dir: {tmp}/report", "dir: elsewhere/report"))
    assert "dir: elsewhere/report" in (run / "config.yaml").read_text()
    again = export_run(run, name="same", root=tmp_path / "bundles")
    assert (again.version, again.unchanged) == (first.version, True)
    assert again.manifest["recipe"] == first.manifest["recipe"]  # the first export's provenance is kept


def test_the_flags_reference_is_read_from_ood_reference_json_and_else_from_the_fit_splits_rows(tiny_run, tmp_path):
    import shutil

    from workbench.bundle.files import BundleFiles
    from workbench.core.errors import DataError
    from workbench.monitoring.reference import read_reference

    def exported_ood_series(name):
        root = export_run(run, name=name, root=tmp_path / "bundles").path
        manifest = json.loads((root / "manifest.json").read_text())
        return read_reference(BundleFiles(root, manifest), manifest, str(root)).series["ood"]

    tmp, _ = tiny_run
    run = Path(shutil.copytree(tmp / "run", tmp_path / "run"))
    calibrate = run / "stages/calibrate"
    split = json.loads((calibrate / "summary.json").read_text())["fit_split"]
    (calibrate / "ood_reference.json").write_text(json.dumps({"split": split, "questions": 1000, "flagged": 50}))
    series = exported_ood_series("whole")
    assert series.n == 1000 and series.proportions == pytest.approx([0.95, 0.05])
    (calibrate / "ood_reference.json").write_text(json.dumps({"split": split, "questions": 10, "flagged": 11}))
    with pytest.raises(DataError, match=r"ood_reference\.json: 'flagged' must be a count in \[0, questions\]"):
        exported_ood_series("tampered")
    assert not (tmp_path / "bundles" / "tampered").exists()  # nothing half-written
    # a calibrate output made before ood_reference.json: the flag on the fit split's collected rows (here doctored
    # to all flagged, so the source is plain)
    (calibrate / "ood_reference.json").unlink()
    checks = json.loads((calibrate / "ood_checks.json").read_text())
    checks[split]["checks"] = [["question_embedding"]] * len(checks[split]["checks"])
    (calibrate / "ood_checks.json").write_text(json.dumps(checks))
    series = exported_ood_series("rows")
    assert series.n == len(checks[split]["checks"]) and series.proportions == pytest.approx([0.0, 1.0])


# ---------------------------------------------------------------------- a bundle answering with a served model


@pytest.fixture(scope="module")
def model_server(tiny_lm_long_dir):
    from workbench.serve.openai_server import start_in_thread

    with start_in_thread(str(tiny_lm_long_dir), served_name="tiny", max_logprobs=100) as server:
        yield server


def test_the_manifest_records_the_generators_probe_answers(tiny_run):
    manifest = json.loads((_bundle(tiny_run) / "manifest.json").read_text())
    probe = manifest["models"]["generator"]["probe"]
    assert len(probe["texts"]) == 3 and all(isinstance(v, float) for row in probe["logprobs"] for v in row)


def test_a_bundle_answers_with_its_model_served_as_it_does_in_process(tiny_run, model_server):
    bundle = _bundle(tiny_run)
    local = load_bundle(bundle)
    served = load_bundle(bundle, {"base_url": model_server.base_url, "served_model": "tiny"})
    questions = ["Who wrote Hamlet?", "Which river flows through Paris?"]
    for method in ("no_rag", "standard_rag", "dtr"):
        want, got = local.answer_many(questions, method), served.answer_many(questions, method)
        assert [a.text for a in got] == [a.text for a in want], method
        assert [a.retrieved for a in got] == [a.retrieved for a in want], method
        assert [a.passages for a in got] == [a.passages for a in want], method
        assert any("probe answers match" in note for note in got[0].notes)
    with pytest.raises(ConfigError, match="d2rag needs 'step_logits'"):
        served.answer("Who wrote Hamlet?", "d2rag")  # contrastive decoding: in-process only
    assert served.warm() is served  # warming skips what the server cannot serve


def test_another_served_model_is_refused_unless_allowed(tiny_run, tmp_path):
    from tests.tiny_models import build_tiny_llama
    from workbench.serve.openai_server import start_in_thread

    other = build_tiny_llama(tmp_path / "other", seed=7, max_positions=4096)
    with start_in_thread(str(other), served_name="tiny") as server:
        options = {"base_url": server.base_url, "served_model": "tiny"}
        with pytest.raises(AssetError, match=r"is not the bundle's generator.*allow_model_mismatch"):
            load_bundle(_bundle(tiny_run), options).answer("Who wrote Hamlet?", "no_rag")
        allowed = load_bundle(_bundle(tiny_run), {**options, "allow_model_mismatch": True})
        answer = allowed.answer("Who wrote Hamlet?", "no_rag")
        assert any("learned on another model" in note for note in answer.notes)


def test_infer_answers_with_a_served_model_from_the_command_line(tiny_run, model_server):
    result = CliRunner().invoke(
        app,
        ["infer", "--bundle", str(_bundle(tiny_run)), "--base-url", model_server.base_url, "--served-model", "tiny",
         "--method", "no_rag", "--json", "Who wrote Hamlet?"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    line = result.output.strip().splitlines()[-1]
    answer = json.loads(line[line.index("{") :])  # after any progress bar the runner mixed into stdout
    assert answer["method"] == "no_rag" and any("served at" in note for note in answer["notes"])


def test_a_bundle_with_a_greedy_only_router_decides_without_sampling(tiny_run):
    """The tiny run's router reads only features that ride on the greedy answer (entropy, which needs the samples,
    adds nothing to confidence there): its bundle computes only their stats — one LM call, no sampling call."""
    from workbench.runtime import load_bundle
    from workbench.uncertainty.stat_costs import feature_components

    root = _bundle(tiny_run)
    features = json.loads((root / "manifest.json").read_text())["decision"]["features"]
    assert feature_components(features) == {"greedy"}, features
    runtime = load_bundle(root)
    generator = runtime.tools().generator
    calls: list[dict] = []
    original = generator.generate

    def spy(prompts, **kwargs):
        calls.append({"prompts": len(prompts), "n": kwargs.get("n", 1), "temperature": kwargs.get("temperature")})
        return original(prompts, **kwargs)

    generator.generate = spy
    try:
        answer = runtime.answer("Was Marie Curie born in Poland or in France?", method="d2rag")
    finally:
        generator.generate = original
    cost = next(step["cost"] for step in answer.trace["steps"] if step["name"] == "features")
    assert cost.get("lm_calls", 0) + cost.get("cached_lm_calls", 0) == 1
    assert not [c for c in calls if (c["temperature"] or 0) > 0 or c["n"] > 1]


def test_bench_runtime_prices_and_measures_what_deciding_costs(tiny_run):
    from workbench.bench.runtime.report import decision_cost_lines
    from workbench.bench.runtime.run import measure_decision_cost
    from workbench.runtime import load_bundle

    tmp, _ = tiny_run
    runtime = load_bundle(_bundle(tiny_run))
    cost = measure_decision_cost(tmp / "run", runtime, ["Was Marie Curie born in Poland or in France?"])
    assert cost["shipped_features"] == list(runtime.policy.features) and cost["tau"] <= 1.0
    # the greedy-only router pays the greedy answer; every collected feature adds entropy's samples
    assert cost["priced"]["shipped"]["lm_calls"] == 1.0 and cost["priced"]["all"]["lm_calls"] == 2.0
    assert cost["measured"]["lm_calls"] == 1.0
    assert "## What deciding costs (per question)" in "\n".join(decision_cost_lines(cost))
