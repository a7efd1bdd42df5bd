"""Property: a mutated bundle is refused in one line or accepted consistently — never a traceback, never a read outside
the files its manifest lists and verifies.

Each case copies the committed tiny bundle into a fresh sandbox (next to a planted ``secret.json`` the mutations may
point at), edits the manifest, a learned JSON file or a file's bytes, and, most of the time, reseals it — the file
table and the content digest recomputed, as an adversary who can write the manifest would. Then ``load_bundle`` runs
under a watch of every file the process opens. An accepted bundle must answer the decision path (P(correct) in
[0, 1], or a one-line refusal of the input) and describe itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import shutil
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.common import VALUES, mutate, record, refused_or, watch_opens
from tests.fuzz.common import assert_reads_within as reads_within
from workbench.bundle.manifest import content_digest
from workbench.core.errors import WorkbenchError
from workbench.runtime import load_bundle

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bundles" / "tiny" / "1.0.0"
PROVENANCE = ("recipe", "metrics", "data", "workbench")
LEARNED = ["learned/calibrators.json", "learned/classifier.json", "learned/utility.json"]


def _sandbox() -> tuple[tempfile.TemporaryDirectory, Path, Path]:
    holder = tempfile.TemporaryDirectory(prefix="wb-fuzz-")
    sandbox = Path(holder.name)
    (sandbox / "secret.json").write_text('{"kind": "calibrator_set", "version": 1}')
    root = Path(shutil.copytree(FIXTURE, sandbox / "b" / "tiny" / "1.0.0"))
    return holder, sandbox, root


def _reseal(root: Path, manifest: dict) -> None:
    files = manifest.get("files")
    if isinstance(files, dict):
        for name in list(files):
            path = root / name if isinstance(name, str) else None
            if path is not None and path.is_file() and isinstance(files[name], dict):
                data = path.read_bytes()
                files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        with contextlib.suppress(TypeError, ValueError):  # too broken to digest: the loader refuses it anyway
            manifest["content_sha256"] = content_digest(manifest, files)


def _write_json(path: Path, doc: object) -> None:
    path.write_text(json.dumps(doc))  # NaN / Infinity are written as such: the strict reader must refuse them


def _exercise(root: Path, sandbox: Path, name: str, classifier: str) -> None:
    """Load under the watch; an accepted bundle must decide and describe itself consistently."""
    with watch_opens() as opened:
        runtime = refused_or(name, lambda: load_bundle(root, {"classifier": classifier}))
    reads_within(opened, root, sandbox)
    if runtime is None:
        return
    info = runtime.info()
    assert info["name"] == runtime.name and set(info["methods"]) == set(runtime.methods)
    if runtime.policy is not None:
        medians = {f: runtime.learned.medians.get(f, 0.0) for f in runtime.policy.features}
        for raw in (medians, {}, dict.fromkeys(runtime.policy.features, math.inf)):
            decision = runtime.decide(raw)
            assert 0.0 <= decision.p_correct <= 1.0 and decision.retrieve == (decision.p_correct < runtime.policy.tau)
    again = load_bundle(root, {"classifier": classifier})
    assert again.manifest == runtime.manifest


@given(data=st.data(), reseal=st.sampled_from([True, True, True, False]), onnx=st.booleans())
def test_mutated_manifests(data, reseal, onnx):
    holder, sandbox, root = _sandbox()
    with holder:
        manifest = mutate(json.loads((root / "manifest.json").read_text()), data, skip=PROVENANCE)
        if reseal and isinstance(manifest, dict):
            _reseal(root, manifest)
        _write_json(root / "manifest.json", manifest)
        _exercise(root, sandbox, "bundle manifest", "onnx" if onnx else "numpy")


@given(data=st.data(), target=st.sampled_from(LEARNED), onnx=st.booleans())
def test_mutated_learned_files(data, target, onnx):
    holder, sandbox, root = _sandbox()
    with holder:
        doc = mutate(json.loads((root / target).read_text()), data)
        _write_json(root / target, doc)
        manifest = json.loads((root / "manifest.json").read_text())
        _reseal(root, manifest)
        _write_json(root / "manifest.json", manifest)
        _exercise(root, sandbox, "bundle learned file", "onnx" if onnx else "numpy")


@given(
    target=st.sampled_from([*LEARNED, "learned/classifier.onnx", "manifest.json"]),
    edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=6),
    cut=st.one_of(st.none(), st.floats(0, 1)),
    reseal=st.booleans(),
)
def test_mutated_bytes(target, edits, cut, reseal):
    holder, sandbox, root = _sandbox()
    with holder:
        path = root / target
        data = bytearray(path.read_bytes())
        for where, value in edits:
            data[int(where * len(data))] = value
        if cut is not None:
            data = data[: int(cut * len(data))]
        path.write_bytes(bytes(data))
        if reseal and target != "manifest.json":
            manifest = json.loads((root / "manifest.json").read_text())
            _reseal(root, manifest)
            _write_json(root / "manifest.json", manifest)
        _exercise(root, sandbox, "bundle bytes", "numpy")


@given(features=st.one_of(VALUES, st.dictionaries(st.sampled_from(["confidence", "entropy", "dtr_nll", "x"]), VALUES)))
def test_decide_inputs(features):
    runtime = _LOADED.get("rt") or _LOADED.setdefault("rt", load_bundle(FIXTURE))
    try:
        decision = runtime.decide(features)
    except WorkbenchError as exc:
        from tests.fuzz.common import assert_one_line

        assert_one_line(exc)
        record("decide input", "refused")
        return
    record("decide input", "accepted")
    assert 0.0 <= decision.p_correct <= 1.0


_LOADED: dict[str, object] = {}
