"""The OOD flag end to end on a bundle: the committed fixture (schema 1.0, no profile) plus ``learned/ood.json`` (and
``learned/ood.safetensors`` with the embedding check) named by ``decision.files.ood`` and listed in the manifest,
answered with the tiny test models.

Covers: every answer carries ``ood`` (None for an old bundle without a profile, or with an uncalibrated version-1 one,
which a runtime note names), the question-form check for every method and D²-RAG's own checks in its ``features``
step, the embedding check run with the runtime's embedder (off, with a note, for another embedder), a flagged
answer's note, ``on_ood: retrieve`` forcing D²-RAG's retrieval, ``refuse`` refusing, ``workbench infer`` rows and a
``serve`` response carrying it, and a tampered ood.json refused.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from workbench.calibration.ood import OODProfile
from workbench.core.errors import DataError
from workbench.methods.learned import save_learned
from workbench.runtime import load_bundle

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "bundles" / "tiny" / "1.0.0"
OPEN = "Who has the most catches in the history of the National Football League?"
EITHER_OR = "Was Ovid Roman or Greek? Reply with one word."
FIT = [
    "Was Arthur Schopenhauer German or American? Reply with one word.",
    "Is Kharkiv in Azerbaijan or in Ukraine? Reply with the country only.",
    "Which name fills the blank, Chariot or Sailing? Reply with the name only.",
] * 10
PROFILE = OODProfile.fit(FIT)  # the form and length checks only: the open question fails its form


def _write_manifest(root: Path, manifest: dict) -> None:
    from workbench.bundle.manifest import content_digest

    manifest["content_sha256"] = content_digest(manifest, manifest["files"])
    (root / "manifest.json").write_text(json.dumps(manifest))


def _bundle(
    tmp: Path, *, profile: OODProfile | dict | None = PROFILE, tau: float | None = None, name: str = "tiny"
) -> Path:
    """A copy of the fixture with an OOD ``profile`` (an :class:`OODProfile`, or a raw JSON dict written as
    ``learned/ood.json``; default: the form and length checks of :data:`FIT`) and / or another τ."""
    root = Path(shutil.copytree(FIXTURE, tmp / name / "1.0.0"))
    manifest = json.loads((root / "manifest.json").read_text())
    if profile is not None:
        path = root / "learned" / "ood.json"
        written = [path] if isinstance(profile, dict) else save_learned(profile, path)
        if isinstance(profile, dict):
            path.write_text(json.dumps(profile))
        for file in written:
            data = file.read_bytes()
            record = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            manifest["files"][f"learned/{file.name}"] = record
        manifest["decision"]["files"]["ood"] = "learned/ood.json"
    if tau is not None:
        manifest["decision"]["tau"] = tau
    _write_manifest(root, manifest)
    return root


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_lm_long_dir, tiny_encoder_dir) -> dict:
    """Runtime overrides answering with the tiny models and a small corpus (the fixture's paths are gone)."""
    from tests.bundle_run import write_corpus

    corpus = write_corpus(tmp_path_factory.mktemp("ood-corpus") / "corpus.jsonl", n=50)
    return {
        "generator": str(tiny_lm_long_dir),
        "embedder": str(tiny_encoder_dir),
        "allow_model_mismatch": True,
        "corpus": str(corpus),
        "allow_corpus_mismatch": True,
    }


@pytest.fixture(scope="module")
def runtime(tmp_path_factory, models):
    return load_bundle(_bundle(tmp_path_factory.mktemp("ood-bundle")), models)


def _step(answer, name: str) -> dict:
    return next(s for s in answer.trace["steps"] if s["name"] == name)["detail"]


def test_an_old_bundle_without_a_profile_answers_with_ood_null(tmp_path, models):
    rt = load_bundle(_bundle(tmp_path, profile=None), models)
    assert rt.ood is None and rt.info()["ood"] is None
    (answer,) = rt.answer_many([OPEN], "no_rag")
    assert answer.ood is None and answer.to_dict()["ood"] is None and answer.lm_calls > 0


def test_an_uncalibrated_version_1_profile_is_not_used_and_a_note_says_so(tmp_path, models):
    old = {"kind": "ood_profile", "version": 1, "rows": 30, "features": {}}  # what calibrate wrote before
    rt = load_bundle(_bundle(tmp_path, profile=old), models)
    assert rt.ood is None and any("uncalibrated (version 1)" in note for note in rt.notes)
    (answer,) = rt.answer_many([OPEN], "no_rag")
    assert answer.ood is None and any("uncalibrated" in note for note in answer.notes)


def test_a_flagged_answer_carries_a_note_and_an_unflagged_one_does_not(runtime):
    flagged, fine = runtime.answer_many([OPEN, EITHER_OR], "no_rag")
    assert flagged.notes[0] == PROFILE.note(["question_form"])
    assert flagged.notes[0].startswith("out of distribution for this bundle (question_form)")
    assert not any(note.startswith("out of distribution") for note in fine.notes)


def _embedding_profile(encoder_dir: Path, fingerprint: str | None = None) -> OODProfile:
    """The FIT profile with an embedding check by the tiny encoder; its threshold moved to just above 0, so a question
    of FIT (ten copies in the reference: novelty 0) passes and any other fails."""
    from workbench.backends.embedder import Embedder

    embedder = Embedder(str(encoder_dir), cache=False)
    profile = OODProfile.fit(FIT, embedder.encode(FIT), embedder=fingerprint or embedder.fingerprint, neighbours=5)
    profile.embedding.threshold = 1e-4
    return profile


def test_the_embedding_check_runs_with_the_runtimes_embedder(tmp_path, models, tiny_encoder_dir):
    rt = load_bundle(_bundle(tmp_path, profile=_embedding_profile(tiny_encoder_dir)), models)
    assert (rt.root / "learned" / "ood.safetensors").is_file() and rt.ood.embedding is not None
    seen, novel, open_ = rt.answer_many([FIT[0], EITHER_OR, OPEN], "no_rag")
    assert seen.ood == {"flag": False, "checks": [], "action": None}
    assert novel.ood == {"flag": True, "checks": ["question_embedding"], "action": "reported"}
    assert open_.ood["checks"] == ["question_embedding", "question_form"]
    assert novel.notes[0].startswith("out of distribution for this bundle (question_embedding)")
    refused, fine = rt.answer_many([EITHER_OR, FIT[1]], "d2rag", on_ood="refuse")
    assert refused.text == "" and refused.lm_calls == 0 and fine.lm_calls > 0
    assert _step(fine, "features")["ood"] == {"flag": False, "checks": []}


def test_another_embedder_turns_the_embedding_check_off_with_a_note(tmp_path, models, tiny_encoder_dir):
    profile = _embedding_profile(tiny_encoder_dir, fingerprint="another-embedder")
    rt = load_bundle(_bundle(tmp_path, profile=profile), models)
    novel, open_ = rt.answer_many([EITHER_OR, OPEN], "no_rag")
    assert novel.ood["flag"] is False and open_.ood["checks"] == ["question_form"]
    assert any("embedding check is off" in note for note in novel.notes)
    (d2rag,) = rt.answer_many([EITHER_OR], "d2rag")
    assert _step(d2rag, "features")["ood"] == {"flag": False, "checks": []}


def test_every_method_flags_an_open_question_and_not_an_either_or_one(runtime):
    assert runtime.info()["ood"]["on_ood"] == "flag"
    for method in ("no_rag", "standard_rag"):
        flagged, fine = runtime.answer_many([OPEN, EITHER_OR], method)
        assert flagged.ood == {"flag": True, "checks": ["question_form"], "action": "reported"}, method
        assert fine.ood == {"flag": False, "checks": [], "action": None}, method
        assert flagged.lm_calls > 0 and fine.lm_calls > 0  # flag only reports (the tiny model may answer "")


def test_d2rag_records_its_own_checks_in_the_features_step(runtime):
    flagged, fine = runtime.answer_many([OPEN, EITHER_OR], "d2rag")
    assert _step(flagged, "features")["ood"] == {"flag": True, "checks": ["question_form"]}
    assert _step(fine, "features")["ood"] == {"flag": False, "checks": []}
    assert flagged.ood["checks"] == ["question_form"] and not fine.ood["flag"]


def test_on_ood_retrieve_forces_d2rags_retrieval(tmp_path, models):
    rt = load_bundle(_bundle(tmp_path, tau=0.0), models)  # τ = 0: p < τ never, so D²-RAG never retrieves
    plain = rt.answer_many([OPEN, EITHER_OR], "d2rag")
    assert [a.retrieved for a in plain] == [False, False] and plain[0].ood["action"] == "reported"
    forced, fine = rt.answer_many([OPEN, EITHER_OR], "d2rag", on_ood="retrieve")
    assert _step(forced, "decide")["retrieve"] and _step(forced, "decide")["forced_by_ood"]
    assert forced.ood["action"] == "retrieved" and forced.passages
    assert forced.notes[0].startswith("out of distribution for this bundle")
    assert not fine.retrieved and "forced_by_ood" not in _step(fine, "decide")


def test_on_ood_refuse_returns_no_answer_with_a_reason(runtime):
    refused, fine = runtime.answer_many([OPEN, EITHER_OR], "d2rag", on_ood="refuse")
    assert refused.text == "" and refused.ood["action"] == "refused" and refused.lm_calls == 0
    assert refused.notes[0].startswith("refused: out of distribution") and "question_form" in refused.notes[0]
    assert fine.lm_calls > 0 and "refused" not in fine.trace and fine.ood["action"] is None
    with pytest.raises(Exception, match="on_ood"):
        runtime.answer_many([OPEN], "no_rag", on_ood="ignore")


def test_infer_rows_carry_ood(tmp_path, runtime):
    from typer.testing import CliRunner

    from workbench.cli import app

    questions = tmp_path / "q.jsonl"
    rows = [{"id": "a", "question": OPEN}, {"id": "b", "question": EITHER_OR}]
    questions.write_text("".join(json.dumps(row) + "\n" for row in rows))
    output = tmp_path / "a.jsonl"
    sets = [f"--set={key}={value}" for key, value in runtime.options.__dict__.items() if key in _MODEL_KEYS]
    args = ["infer", "--bundle", str(runtime.root), "--method", "no_rag", *sets, "--on-ood", "refuse"]
    result = CliRunner().invoke(app, [*args, "--input", str(questions), "--output", str(output)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert rows[0]["ood"] == {"flag": True, "checks": ["question_form"], "action": "refused"}
    assert rows[0]["answer"] == ""
    assert rows[1]["ood"]["flag"] is False and rows[1]["lm_calls"] > 0
    shown = CliRunner().invoke(app, [*args[:-2], OPEN])
    assert shown.exit_code == 0 and "out of distribution: question_form (reported)" in shown.output, shown.output


_MODEL_KEYS = ("generator", "embedder", "allow_model_mismatch", "corpus", "allow_corpus_mismatch")


def test_a_serve_response_carries_a_typed_ood(runtime):
    import httpx

    from tests.unit.serve.fake_runtime import serving
    from workbench.serve import create_app

    app = create_app(runtime)
    with serving(app) as url:
        body = httpx.post(f"{url}/answer", json={"questions": [OPEN, EITHER_OR], "method": "no_rag"}, timeout=120)
        assert body.status_code == 200, body.text
        flagged, fine = body.json()["answers"]
        assert flagged["ood"] == {"flag": True, "checks": ["question_form"], "action": "reported"}
        assert fine["ood"]["flag"] is False
        refused = httpx.post(f"{url}/answer", json={"question": OPEN, "on_ood": "refuse"}, timeout=120).json()
        assert refused["answers"][0]["text"] == "" and refused["answers"][0]["ood"]["action"] == "refused"
        bad = httpx.post(f"{url}/answer", json={"question": OPEN, "on_ood": "maybe"})
        assert bad.status_code == 422
        spec = httpx.get(f"{url}/openapi.json").json()["components"]["schemas"]
        assert set(spec["OODInfo"]["properties"]) == {"flag", "checks", "action"}


def test_a_tampered_ood_profile_is_refused_by_the_manifest_digest(tmp_path):
    root = _bundle(tmp_path)
    path = root / "learned" / "ood.json"
    profile = json.loads(path.read_text())
    profile["margin"] = 1000.0  # a wider tolerance: nothing would ever be flagged
    path.write_text(json.dumps(profile))
    with pytest.raises(DataError, match=r"ood\.json"):
        load_bundle(root)


def test_a_profile_file_the_manifest_does_not_list_is_refused(tmp_path):
    root = _bundle(tmp_path)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["decision"]["files"]["ood"] = "learned/elsewhere.json"
    _write_manifest(root, manifest)
    with pytest.raises(DataError, match=r"decision\.files\.ood"):
        load_bundle(root)
