"""Issue 25's attacks on bundles and archives, one test each: every one loaded (or read outside the bundle, or hung,
or gave a traceback) before its fix, and is now refused in one line — or, for the extract cache, answered with the
archive's own content.

The bundles are edits of the committed tiny fixture (tests/fixtures/bundles/tiny); `_reseal` recomputes the file
table and the content digest the way an exporter would, so an attack that an adversary can make consistent is
tested consistent. A sys.audit hook (conftest.py) records every file the process opens, so "never read" is checked,
not assumed.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import sys
import tarfile
import zlib
from pathlib import Path

import pytest

from workbench.bundle.archive import ArchiveLimits, extract_archive, scan_archive, write_archive
from workbench.bundle.extract_cache import prune_extract_cache
from workbench.bundle.manifest import content_digest
from workbench.core.errors import DataError
from workbench.runtime import load_bundle

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "bundles" / "tiny"


def _manifest(root: Path) -> dict:
    return json.loads((root / "manifest.json").read_text())


def _reseal(root: Path, manifest: dict) -> None:
    """Write ``manifest`` with every listed file's size and sha256 and the content digest recomputed."""
    for name in manifest["files"]:
        data = (root / name).read_bytes()
        manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    manifest["content_sha256"] = content_digest(manifest, manifest["files"])
    (root / "manifest.json").write_text(json.dumps(manifest))


# ------------------------------------------------------------------------------------ only verified bytes
@pytest.mark.parametrize(
    ("block", "key"),
    [("decision.files", "classifier_onnx"), ("decision.files", "calibrators"), ("utility", "file")],
)
@pytest.mark.parametrize("kind", ["absolute", "dotdot", "unlisted"])
def test_a_block_naming_a_file_outside_the_verified_set_is_refused_before_it_is_read(
    bundle, secret, opened, block, key, kind
):
    manifest = _manifest(bundle)
    if kind == "unlisted":  # inside the tree but not in `files`: the tree check refuses the extra file itself
        shutil.copy(secret, bundle / "learned" / "other.json")
        value = "learned/other.json"
    else:
        value = str(secret) if kind == "absolute" else "../../outside/secret.json"
    node = manifest
    for part in block.split("."):
        node = node[part]
    node[key] = value
    _reseal(bundle, manifest)
    opened.clear()  # what the load opens, not the set-up
    with pytest.raises(DataError) as refused:
        load_bundle(bundle)
    assert "\n" not in str(refused.value)
    assert str(secret) not in opened and not any(p.endswith("other.json") for p in opened)


def test_the_adapter_block_cannot_name_a_file_outside_the_bundle(bundle, secret, opened):
    manifest = _manifest(bundle)
    manifest["controller_adapter"] = {"file": "/etc/passwd", "kind": "controller_adapter"}
    _reseal(bundle, manifest)
    with pytest.raises(DataError, match=r"'controller_adapter\.file' names '/etc/passwd'"):
        load_bundle(bundle)
    assert "/etc/passwd" not in opened


def test_an_edited_field_without_a_new_digest_is_refused(bundle):
    manifest = _manifest(bundle)
    manifest["decision"]["tau"] = 0.0  # "never retrieve", content_sha256 left as exported
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="content_sha256 does not match"):
        load_bundle(bundle)


def test_a_duplicate_key_in_the_manifest_is_refused(bundle):
    text = (bundle / "manifest.json").read_text()
    decision = json.dumps({**_manifest(bundle)["decision"], "tau": 0.0})
    (bundle / "manifest.json").write_text(text.rstrip().rstrip("}") + f', "decision": {decision}}}')
    with pytest.raises(DataError, match="duplicate key 'decision'"):
        load_bundle(bundle)


def test_a_duplicate_key_in_a_learned_file_is_refused(bundle):
    path = bundle / "learned" / "calibrators.json"
    text = path.read_text().rstrip()
    path.write_text(text[:-1] + ', "features": ["confidence", "entropy", "dtr_nll"]}')
    _reseal(bundle, _manifest(bundle))
    with pytest.raises(DataError, match=r"calibrators\.json: not accepted as JSON: duplicate key 'features'"):
        load_bundle(bundle)


def test_an_onnx_graph_that_disagrees_with_the_numpy_weights_is_refused_without_showing_the_gap(bundle):
    import onnx
    from onnx import numpy_helper

    path = bundle / "learned" / "classifier.onnx"
    proto = onnx.load(str(path))
    bias = next(t for t in proto.graph.initializer if t.name == "net.3.bias")  # the MLP's output bias: P(correct) ≈ 1
    bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias) + 20.0, bias.name))
    path.write_bytes(proto.SerializeToString())
    _reseal(bundle, _manifest(bundle))
    with pytest.raises(DataError, match="ONNX classifier and the numpy classifier disagree") as refused:
        load_bundle(bundle)
    assert "over 1e-05 on check points" in str(refused.value)  # the bound, never the gap the graph computed


def test_an_onnx_graph_with_external_data_is_refused(bundle, secret, opened):
    import onnx

    path = bundle / "learned" / "classifier.onnx"
    proto = onnx.load(str(path))
    tensor = proto.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", str(secret)
    path.write_bytes(proto.SerializeToString())
    _reseal(bundle, _manifest(bundle))
    opened.clear()
    with pytest.raises(DataError, match="external data: not allowed"):
        load_bundle(bundle, {"classifier": "onnx"})
    assert str(secret) not in opened


# ------------------------------------------------------------------------------------ a typed manifest
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(seed="seven"), r"'seed' expects int"),
        (lambda m: m.update(seed=-1), r"'seed' must be between 0 and"),
        (lambda m: m["methods"].update(d2rag=5), r"'methods\.d2rag' must be a mapping"),
        (lambda m: m.update(decision=["tau", 0.5]), r"'decision' expects section \| null"),
        (lambda m: m.update(stats="all of them"), r"'stats' expects section \| null"),
        (lambda m: m.update(utility={"kind": "learned"}), r"'utility\.file' must be given"),
        (lambda m: m.update(utility=7), r"'utility' expects section \| null"),
        (lambda m: m["answering"].update(max_new_tokens=10**9), r"'answering\.max_new_tokens' must be between"),
        (lambda m: m["answering"].update(k=True), r"'answering\.k' expects int"),
        (lambda m: m["models"]["generator"].update(dtype="float8"), r"'models\.generator\.dtype' expects"),
        (lambda m: m["features"].append("lars"), r"'features' expects list"),
        (lambda m: m["decision"].update(features=[]), r"'decision\.features' must be distinct names"),
        (lambda m: m["decision"]["files"].update(classifier=3), r"'decision\.files\.classifier' expects str"),
        (lambda m: m.pop("answering"), r"missing required key 'answering'"),
        (lambda m: m["files"]["README.md"].update(size="big"), r"'files\.README\.md\.size' expects int"),
    ],
)
def test_every_malformed_block_is_one_line_naming_the_field(bundle, edit, message):
    manifest = _manifest(bundle)
    edit(manifest)
    (bundle / "manifest.json").write_text(json.dumps(manifest))  # the schema is checked before the digest
    with pytest.raises(DataError, match=message) as refused:
        load_bundle(bundle)
    assert "\n" not in str(refused.value)


def test_nan_in_the_manifest_is_refused_at_load_not_at_the_first_answer(bundle):
    text = (bundle / "manifest.json").read_text().replace('"seed": 0', '"seed": NaN')
    (bundle / "manifest.json").write_text(text)
    with pytest.raises(DataError, match="NaN is not a JSON number"):
        load_bundle(bundle)


@pytest.mark.parametrize("target", ["manifest.json", "learned/calibrators.json"])
def test_runaway_nesting_is_one_line(bundle, target):
    deep = "[" * 100_000 + "]" * 100_000
    if target == "manifest.json":
        (bundle / target).write_text(deep)
    else:
        (bundle / target).write_text('{"kind": "calibrator_set", "version": 1, "x": ' + deep + "}")
        _reseal(bundle, _manifest(bundle))
    with pytest.raises(DataError, match="nested deeper than"):
        load_bundle(bundle)


def test_unknown_fields_of_a_newer_minor_are_noted_not_refused(bundle):
    manifest = _manifest(bundle)
    manifest["answering"]["rerank"] = True
    manifest["served_by"] = {"engine": "vllm"}
    _reseal(bundle, manifest)
    notes = load_bundle(bundle).notes
    assert any("answering.rerank" in n and "served_by" in n for n in notes)


def test_decide_refuses_unknown_features_and_reports_imputed_ones(bundle):
    rt = load_bundle(bundle)
    with pytest.raises(DataError, match=r"unknown feature\(s\) \['confidance'\]"):
        rt.decide({"confidance": 0.2})
    with pytest.raises(DataError, match="must be a number"):
        rt.decide({"confidence": "high"})
    with pytest.raises(DataError, match="expected 3 feature values"):
        rt.decide([0.1, 0.2])
    decision = rt.decide({"confidence": -0.3})
    assert decision.imputed == ["entropy", "dtr_nll"] and 0.0 <= decision.p_correct <= 1.0


# ------------------------------------------------------------------------------------ archives
def _gzip_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], fmt: int = tarfile.PAX_FORMAT) -> Path:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=fmt) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    path.write_bytes(_gzip(raw.getvalue()))
    return path


def _gzip(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


def _file(name: str, data: bytes = b"{}") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _folder(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info, None


def test_a_gzip_bomb_is_refused_after_a_few_megabytes(tmp_path):
    bomb = _gzip_tar(tmp_path / "bomb.tar.gz", [_file("tiny/manifest.json"), _file("tiny/a.json", bytes(64 << 20))])
    assert bomb.stat().st_size < 200_000
    with pytest.raises(DataError, match="compression bomb"):
        load_bundle(bomb, {"extract_dir": str(tmp_path / "x")})
    assert not any((tmp_path / "x").rglob("*")) if (tmp_path / "x").exists() else True


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([_file(f"tiny/{i}.json", b"") for i in range(300)], "unpacks to more than 100000 bytes"),  # headers alone
        ([_file("tiny/manifest.json", bytes(300_000))], "the members' sizes add up to more than 100000 bytes"),
    ],
    ids=["headers", "data"],
)
def test_the_unpacked_cap_counts_headers_and_data(tmp_path, members, message):
    archive = _gzip_tar(tmp_path / "big.tar.gz", members)
    with pytest.raises(DataError, match=message):
        scan_archive(archive, ArchiveLimits(max_unpacked=100_000, max_ratio=1e9))


def test_a_huge_long_name_header_is_refused_before_it_is_read(tmp_path):
    long_name = "tiny/" + "n" * (1 << 20) + ".json"
    archive = _gzip_tar(tmp_path / "longname.tar.gz", [_file(long_name)], fmt=tarfile.GNU_FORMAT)
    with pytest.raises(DataError, match="tar header record of"):
        load_bundle(archive, {"extract_dir": str(tmp_path / "x")})


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([_file("tiny/manifest.json"), _file("tiny/manifest.json", b"[]")], "appears twice"),
        ([_file("tiny/learned"), _file("tiny/learned/x.json")], "below a file of the same name"),
        ([_file("tiny/learned/x.json"), _file("tiny/learned")], "both a file and a folder"),
        ([_folder("tiny/learned"), _file("tiny/learned")], "appears twice"),
        ([_file("tiny/a.json")], "holds no manifest.json"),
    ],
)
def test_clashing_or_duplicate_members_are_one_line(tmp_path, members, message):
    archive = _gzip_tar(tmp_path / "clash.tar.gz", members)
    with pytest.raises(DataError, match=message):
        load_bundle(archive, {"extract_dir": str(tmp_path / "x")})
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").rglob("*.json"))


def test_members_are_checked_against_the_manifest_before_anything_is_written(tmp_path, bundle):
    (bundle / "learned" / "lars.json").write_text("{}")  # present, never listed
    archive = write_archive(bundle, tmp_path / "extra.tar.gz", "tiny-1.0.0")
    with pytest.raises(DataError, match=r"not listed in the manifest: learned/lars\.json"):
        load_bundle(archive, {"extract_dir": str(tmp_path / "x")})
    assert not any((tmp_path / "x").iterdir())


def test_a_member_whose_bytes_differ_from_the_manifest_is_refused_and_nothing_is_left(tmp_path, bundle):
    path = bundle / "learned" / "classifier.json"
    path.write_bytes(path.read_bytes().replace(b"0", b"1", 1))  # same size, other bytes
    archive = write_archive(bundle, tmp_path / "altered.tar.gz", "tiny-1.0.0")
    with pytest.raises(DataError, match="sha256 differs from the manifest's"):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))


def test_a_replaced_cached_copy_is_not_trusted(tmp_path, bundle):
    extract = tmp_path / "cache"
    archive = FIXTURE / "tiny-1.0.0.tar.gz"
    first = load_bundle(archive, {"extract_dir": str(extract)})
    tau = first.manifest["decision"]["tau"]
    manifest = _manifest(bundle)  # another, self-consistent bundle put in the cached copy's place
    manifest["decision"]["tau"] = 0.0
    _reseal(bundle, manifest)
    shutil.rmtree(first.root)
    shutil.copytree(bundle, first.root)
    again = load_bundle(archive, {"extract_dir": str(extract)})
    assert again.root == first.root and again.manifest["decision"]["tau"] == tau != 0.0


def test_the_extract_cache_is_bounded_and_prunable(tmp_path):
    cache = tmp_path / "cache"
    archive = FIXTURE / "tiny-1.0.0.tar.gz"
    root = load_bundle(archive, {"extract_dir": str(cache)}).root
    stale = cache / ("0" * 32)  # an old extraction of another archive
    shutil.copytree(root, stale)
    leftover = cache / f".{'1' * 32}.abc.tmp"  # an interrupted extraction
    leftover.mkdir()
    (cache / "notes.txt").write_text("mine")  # not the cache's: never touched
    import os

    os.utime(stale, (0, 0))
    os.utime(leftover, (0, 0))
    pruned = prune_extract_cache(cache, keep=root)
    assert pruned.removed == 2 and root.is_dir() and not stale.exists() and not leftover.exists()
    assert (cache / "notes.txt").read_text() == "mine"
    emptied = prune_extract_cache(cache, max_bytes=0, max_age_s=0)
    assert emptied.removed == 1 and emptied.kept == 0 and (cache / "notes.txt").exists()


def test_workbench_bundles_prune_empties_the_extract_cache(tmp_path):
    import os
    import subprocess

    cache = tmp_path / "wb-cache"
    load_bundle(FIXTURE / "tiny-1.0.0.tar.gz", {"extract_dir": str(cache / "bundles")})
    (cache / "bundles" / "notes.txt").write_text("mine")
    env = {**os.environ, "WORKBENCH_CACHE_DIR": str(cache)}
    out = subprocess.run(
        [sys.executable, "-m", "workbench", "bundles", "--prune"], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0 and out.stdout.startswith("removed 1 unpacked archive(s)"), out.stdout + out.stderr
    assert [p.name for p in (cache / "bundles").iterdir()] == ["notes.txt"]
