"""Loading a bundle never runs code and refuses anything tampered: one test per check, on the committed fixture.

``tests/fixtures/bundles/tiny/1.0.0`` is a bundle of schema 1.0 (one prompts fingerprint for every prompt) exported from
the tiny test run (see tests/bundle_run.py; `python -m tests.bundle_run WORK_DIR` re-exports it, in the current schema,
when it must change). Loading it needs no model: models load on the first answer, and these tests never answer.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

from workbench.bundle.archive import ArchiveLimits, extract_archive, write_archive
from workbench.bundle.integrity import verify_bundle_dir
from workbench.bundle.schema import SCHEMA_MAJOR, SCHEMA_VERSION
from workbench.core.errors import ConfigError, DataError
from workbench.runtime import load_bundle

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "bundles" / "tiny"


@pytest.fixture
def bundle(tmp_path) -> Path:
    """A fresh copy of the fixture bundle directory."""
    return Path(shutil.copytree(FIXTURE / "1.0.0", tmp_path / "tiny" / "1.0.0"))


def _manifest(root: Path) -> dict:
    return json.loads((root / "manifest.json").read_text())


def _write_manifest(root: Path, manifest: dict) -> None:
    """Write an edited manifest with its content digest recomputed (as an exporter would), so each test reaches the
    check it is about; tests/unit/bundle/test_bundle_attacks.py covers edits that keep the old digest."""
    from workbench.bundle.manifest import content_digest

    manifest["content_sha256"] = content_digest(manifest, manifest["files"])
    (root / "manifest.json").write_text(json.dumps(manifest))


# ----------------------------------------------------------------------------------------------- what loads
def test_the_committed_fixture_loads_and_decides_without_a_model(bundle):
    rt = load_bundle(bundle)
    assert rt.manifest["schema_version"] == "1.0" and SCHEMA_VERSION == "1.7"  # an older minor loads as it is
    assert rt.methods == ("d2rag", "no_rag", "standard_rag") and rt._tools is None  # nothing heavy built yet
    features = rt.policy.features
    low = rt.decide(dict.fromkeys(features, -5.0))
    high = rt.decide(dict.fromkeys(features, 5.0))
    assert low.p_correct <= high.p_correct and isinstance(low.retrieve, bool)
    assert rt.info()["decision"]["features"] == list(features)


def test_numpy_and_onnx_classifiers_give_the_same_probabilities(bundle):
    numpy_rt, onnx_rt = load_bundle(bundle), load_bundle(bundle, {"classifier": "onnx"})
    rng = np.random.default_rng(0)
    rows = [dict(zip(numpy_rt.policy.features, r, strict=True)) for r in rng.normal(size=(64, 3))]
    gap = np.max(np.abs(numpy_rt.policy.p_correct(rows) - onnx_rt.policy.p_correct(rows)))
    assert gap < 1e-6


def test_the_archive_loads_and_is_unpacked_once(tmp_path):
    extract = tmp_path / "unpacked"
    rt = load_bundle(FIXTURE / "tiny-1.0.0.tar.gz", {"extract_dir": str(extract)})
    assert rt.version == "1.0.0" and len(list(extract.iterdir())) == 1
    again = load_bundle(FIXTURE / "tiny-1.0.0.tar.gz", {"extract_dir": str(extract)})
    assert again.root == rt.root


def test_a_newer_minor_loads_with_a_note_and_a_newer_major_is_refused(bundle):
    manifest = _manifest(bundle)
    manifest["schema_version"] = f"{SCHEMA_MAJOR}.{99}"
    manifest["identity"] = {"name": manifest["name"], "version": manifest["version"]}  # required since 1.3
    manifest["a_field_from_the_future"] = {"x": 1}
    _write_manifest(bundle, manifest)
    assert any("newer than" in note for note in load_bundle(bundle).notes)
    manifest["schema_version"] = f"{SCHEMA_MAJOR + 1}.0"
    manifest["workbench"]["version"] = "9.0.0"
    _write_manifest(bundle, manifest)
    with pytest.raises(DataError, match=r"schema 2\.0 is not readable.*install workbench 9\.0\.0"):
        load_bundle(bundle)


# ----------------------------------------------------------------------------------------------- files
def test_a_tampered_file_is_refused(bundle):
    path = bundle / "learned" / "calibrators.json"
    data = bytearray(path.read_bytes())
    data[data.index(b"0.")] = ord("9")  # same size, other content
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"calibrators\.json: sha256 differs"):
        load_bundle(bundle)


def test_a_file_of_another_size_is_refused(bundle):
    with open(bundle / "learned" / "classifier.onnx", "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(DataError, match=r"classifier\.onnx: size"):
        load_bundle(bundle)


def test_a_missing_file_is_refused(bundle):
    (bundle / "learned" / "utility.json").unlink()
    with pytest.raises(DataError, match=r"utility\.json: listed in the manifest but missing"):
        load_bundle(bundle)


def test_an_extra_file_is_refused(bundle):
    (bundle / "learned" / "model.pkl").write_bytes(b"\x80\x04K\x01.")  # a pickle someone slipped in
    with pytest.raises(DataError, match=r"not listed in the manifest: learned/model\.pkl"):
        load_bundle(bundle)


def test_a_listed_pickle_is_refused_by_its_type(bundle):
    (bundle / "learned" / "model.pkl").write_bytes(b"\x80\x04K\x01.")
    manifest = _manifest(bundle)
    manifest["files"]["learned/model.pkl"] = {"sha256": "0" * 64, "size": 5}
    _write_manifest(bundle, manifest)
    with pytest.raises(DataError, match="file type not allowed"):
        load_bundle(bundle)


def test_a_symlink_is_refused(bundle):
    target = bundle / "learned" / "classifier.json"
    moved = bundle.parent / "elsewhere.json"
    target.rename(moved)
    os.symlink(moved, target)
    with pytest.raises(DataError, match="links are not allowed"):
        load_bundle(bundle)


def test_a_path_escaping_the_bundle_is_refused(bundle):
    manifest = _manifest(bundle)
    manifest["files"]["../outside.json"] = {"sha256": "0" * 64, "size": 1}
    _write_manifest(bundle, manifest)
    with pytest.raises(DataError, match="unsafe path"):
        verify_bundle_dir(bundle)


# ----------------------------------------------------------------------------------------------- gold
def test_a_feature_that_requires_the_gold_answer_is_refused(bundle):
    manifest = _manifest(bundle)
    manifest["features"][0]["requires_gold"] = True
    _write_manifest(bundle, manifest)
    with pytest.raises(DataError, match="require the gold answer"):
        load_bundle(bundle)


def test_a_gold_using_method_is_refused(bundle):
    manifest = _manifest(bundle)
    manifest["methods"]["d2rag_oracle"] = {"options": {}, "requires_gold": False}
    _write_manifest(bundle, manifest)
    with pytest.raises(DataError, match="read the gold answer"):
        load_bundle(bundle)


def test_other_prompts_than_the_features_were_collected_with_are_refused(bundle):
    manifest = _manifest(bundle)
    manifest["stats"]["prompts"] = "0123456789abcdef"
    _write_manifest(bundle, manifest)
    with pytest.raises(DataError, match="collected with prompts 0123456789abcdef"):
        load_bundle(bundle)


def test_a_bundle_is_refused_only_for_the_prompt_groups_its_features_read(bundle, monkeypatch):
    from workbench.uncertainty import calculators

    current = calculators.prompt_fingerprints()
    manifest = _manifest(bundle)
    manifest["stats"]["prompts"] = "0123456789abcdef"  # a whole-set fingerprint of other prompts: not consulted
    manifest["stats"]["prompt_groups"] = {"answer": current["answer"]}  # schema 1.1: confidence / entropy / NLL
    _write_manifest(bundle, manifest)
    assert load_bundle(bundle).methods
    monkeypatch.setattr(calculators, "prompt_fingerprints", lambda: {**current, "self_check": "changed"})
    assert load_bundle(bundle).methods  # P(True)'s prompt changed: this bundle's features never read it
    monkeypatch.setattr(calculators, "prompt_fingerprints", lambda: {**current, "answer": "changed"})
    with pytest.raises(DataError, match="other answer prompts"):
        load_bundle(bundle)


def test_an_out_of_range_threshold_is_refused(bundle):
    manifest = _manifest(bundle)
    manifest["decision"]["tau"] = 1.5
    _write_manifest(bundle, manifest)
    with pytest.raises(DataError, match=r"'decision\.tau' must be in \[0, 1\]"):
        load_bundle(bundle)


def test_a_malformed_manifest_is_a_one_line_error(bundle):
    (bundle / "manifest.json").write_text("{broken")
    with pytest.raises(DataError, match="not valid JSON"):
        load_bundle(bundle)
    (bundle / "manifest.json").unlink()
    with pytest.raises(DataError, match=r"no manifest\.json"):
        load_bundle(bundle)


def test_unknown_overrides_are_refused(bundle):
    with pytest.raises(ConfigError, match="unknown key 'devise'"):
        load_bundle(bundle, {"devise": "cpu"})
    with pytest.raises(ConfigError, match="not in the bundle"):
        load_bundle(bundle, {"methods": {"dense_rag": {"k": 2}}})
    with pytest.raises(ConfigError, match="dtr"):
        load_bundle(bundle).method("dtr")


# ----------------------------------------------------------------------------------------------- archives
def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes = b"{}") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info, None


@pytest.mark.parametrize(
    ("member", "message"),
    [
        (_file("/etc/passwd"), "unsafe path"),
        (_file("tiny/../../evil.json"), "unsafe path"),
        (_special("tiny/link.json", tarfile.SYMTYPE, "/etc/passwd"), "is a link"),
        (_special("tiny/hard.json", tarfile.LNKTYPE, "tiny/manifest.json"), "is a link"),
        (_special("tiny/dev", tarfile.CHRTYPE), "not a regular file"),
    ],
)
def test_unsafe_archive_members_are_refused_before_anything_is_written(tmp_path, member, message):
    archive = _tar(tmp_path / "evil.tar.gz", [_file("tiny/manifest.json"), member])
    with pytest.raises(DataError, match=message):
        load_bundle(archive, {"extract_dir": str(tmp_path / "x")})
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").rglob("*.json"))


def test_an_archive_over_the_size_limit_is_refused(tmp_path):
    with pytest.raises(DataError, match="over the limit"):
        load_bundle(FIXTURE / "tiny-1.0.0.tar.gz", {"max_archive_bytes": 1000, "extract_dir": str(tmp_path)})


def test_an_archive_that_unpacks_too_large_is_refused(tmp_path):
    bomb = _tar(tmp_path / "bomb.tar.gz", [_file("tiny/big.json", b"0" * 200_000)])  # compresses to ~300 bytes
    assert bomb.stat().st_size < 5_000
    with pytest.raises(DataError, match="more than 50000 bytes"):  # its members' sizes, before a byte is unpacked
        extract_archive(bomb, tmp_path / "out", limits=ArchiveLimits(max_unpacked=50_000))


def test_an_archive_with_two_top_folders_or_garbage_is_refused(tmp_path):
    two = _tar(tmp_path / "two.tar.gz", [_file("a/manifest.json"), _file("b/manifest.json")])
    with pytest.raises(DataError, match="one top folder"):
        extract_archive(two, tmp_path / "out")
    (tmp_path / "junk.tar.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match=r"\.tar\.gz"):
        extract_archive(tmp_path / "junk.tar.gz", tmp_path / "out2")


def test_a_tampered_archive_is_refused_after_unpacking(tmp_path, bundle):
    (bundle / "learned" / "lars.json").write_text("{}")  # an extra file inside the archive
    archive = write_archive(bundle, tmp_path / "tampered.tar.gz", "tiny-1.0.0")
    with pytest.raises(DataError, match="not listed in the manifest"):
        load_bundle(archive, {"extract_dir": str(tmp_path / "x")})


def test_archives_are_deterministic(tmp_path, bundle):
    first = write_archive(bundle, tmp_path / "a.tar.gz", "tiny-1.0.0").read_bytes()
    os.utime(bundle / "README.md", (1, 1))  # timestamps never reach the archive
    second = write_archive(bundle, tmp_path / "b.tar.gz", "tiny-1.0.0").read_bytes()
    assert first == second == (FIXTURE / "tiny-1.0.0.tar.gz").read_bytes()


def test_a_name_directory_loads_its_highest_version(tmp_path):
    for version in ("1.0.0", "1.10.0", "1.9.3"):
        shutil.copytree(FIXTURE / "1.0.0", tmp_path / "tiny" / version)
    (tmp_path / "tiny" / "notes").mkdir()
    assert load_bundle(tmp_path / "tiny").root.name == "1.10.0"  # numeric order, not text order
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="not a bundle"):
        load_bundle(tmp_path / "empty")
