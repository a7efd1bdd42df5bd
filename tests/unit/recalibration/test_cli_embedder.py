"""``workbench recalibrate`` on a bundle whose OOD profile has the embedding check: the CLI loads the bundle's embedder
as the runtime does (workbench/runtime/tools.py ``bundle_embedder``) and the new monitoring reference's ``ood`` series
is the profile run with it on the feedback's fit questions; an embedder that cannot be loaded is refused in one line,
nothing written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.assets import model_weights, resolve_embedder
from workbench.backends.embedder import Embedder
from workbench.bundle.files import BundleFiles
from workbench.bundle.integrity import verify_bundle_dir
from workbench.monitoring.reference import REFERENCE_FILE
from workbench.recalibration.compare import holdout_split

from .feedback_data import shifted_rows, write_jsonl
from .test_version import run_cli


def embedding_bundle(tmp_path, encoder_dir, ref: str | None = None):
    """The fixture bundle with the OOD profile of the runtime tests whose embedding check is the tiny encoder's
    (a question of its fit set passes, any other fails), naming ``ref`` (default: the encoder) as its embedder."""
    from tests.unit.bundle.test_bundle_attacks import _reseal
    from tests.unit.runtime.test_ood_runtime import _bundle, _embedding_profile

    root = _bundle(tmp_path, profile=_embedding_profile(encoder_dir))
    manifest = json.loads((root / "manifest.json").read_text())
    digest = model_weights(resolve_embedder(str(encoder_dir)))["weights_sha256"]
    ref = ref or str(encoder_dir)
    manifest["models"]["embedder"] = {"ref": ref, "path": ref, "source": "local", "weights_sha256": digest}
    _reseal(root, manifest)
    return root


def test_the_cli_runs_the_embedding_check_with_the_bundles_embedder(tmp_path, monkeypatch, capsys, tiny_encoder_dir):
    from tests.unit.runtime.test_ood_runtime import EITHER_OR, FIT

    parent = embedding_bundle(tmp_path, tiny_encoder_dir)
    rows = shifted_rows(200)
    for i, row in enumerate(rows):  # a third novel to the profile's embeddings (their form passes), the rest seen
        row["question"] = EITHER_OR if i % 3 == 0 else FIT[i % 3]
    feedback = write_jsonl(tmp_path / "feedback.jsonl", rows)
    code, _, err = run_cli(monkeypatch, capsys, "--bundle", str(parent), "--feedback", str(feedback), "--no-archive")
    assert code == 0, err
    written = parent.parent / "1.1.0"
    manifest = verify_bundle_dir(written)
    held = holdout_split(np.array([row["label"] for row in rows]), 0.3, 0)  # the CLI's defaults: --holdout, --seed
    questions = [row["question"] for row, h in zip(rows, held, strict=True) if not h]
    own = verify_bundle_dir(parent)
    profile = BundleFiles(parent, own).learned(own["decision"]["files"]["ood"], "ood", {"ood_profile"})
    flags = [c.ood for c in profile.check_questions(questions, Embedder(str(tiny_encoder_dir), cache=False).encode)]
    share = sum(flags) / len(flags)
    assert 0.2 < share < 0.5  # the embedding check flags the novel questions: the form check alone flags none
    series = json.loads((written / REFERENCE_FILE).read_text())["series"]
    assert series["ood"]["proportions"] == pytest.approx([1 - share, share])
    assert not any("ood series is" in note for note in manifest["notes"])


def test_an_embedder_that_cannot_be_loaded_is_refused_in_one_line(tmp_path, monkeypatch, capsys, tiny_encoder_dir):
    parent = embedding_bundle(tmp_path, tiny_encoder_dir, ref=str(tmp_path / "gone"))
    feedback = write_jsonl(tmp_path / "feedback.jsonl", shifted_rows(200))
    capsys.readouterr()  # what building the bundle printed (the encoder's loading bar)
    code, _, err = run_cli(monkeypatch, capsys, "--bundle", str(parent), "--feedback", str(feedback))
    assert code == 2 and err.startswith("error: embedder reference: no such embedder") and err.count("\n") == 1, err
    assert sorted(p.name for p in parent.parent.iterdir()) == ["1.0.0"]
