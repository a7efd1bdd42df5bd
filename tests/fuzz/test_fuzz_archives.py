"""Property: a mutated bundle archive is refused in one line, or unpacks to exactly the files its manifest verifies —
never a traceback, never a byte written outside the extract directory, never a half-written extraction left behind.

Mutations act on the committed archive's tar stream (bytes flipped, cut, inserted, a header field rewritten, a
member — a sparse one too — appended or duplicated) and then re-gzipped, or on the gzip bytes themselves (trailing
bytes included).
"""

from __future__ import annotations

import io
import re
import tarfile
import tempfile
import zlib
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.common import assert_reads_within as reads_within
from tests.fuzz.common import refused_or, watch_opens
from workbench.bundle.integrity import verify_bundle_dir
from workbench.runtime import load_bundle

ARCHIVE = Path(__file__).resolve().parents[1] / "fixtures" / "bundles" / "tiny" / "tiny-1.0.0.tar.gz"
TAR = zlib.decompress(ARCHIVE.read_bytes(), 16 + zlib.MAX_WBITS)
ENTRY = re.compile(r"^[0-9a-f]{32}$")


def _end_of_members(stream: bytes) -> int:
    """Where the end-of-archive blocks start: appended members go there, or tarfile would never reach them."""
    with tarfile.open(fileobj=io.BytesIO(stream)) as tar:
        return max(m.offset_data + -(-m.size // 512) * 512 for m in tar.getmembers())


END = _end_of_members(TAR)


def _gzip(data: bytes) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


def _member(name: str, data: bytes, kind: bytes = tarfile.REGTYPE, link: str = "") -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.linkname = (len(data) if kind == tarfile.REGTYPE else 0), kind, link
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return raw.getvalue()[:-1024]  # without the end-of-archive blocks


NAMES = st.sampled_from(
    [
        "tiny-1.0.0/manifest.json",
        "tiny-1.0.0/learned/classifier.json",
        "tiny-1.0.0/learned",
        "tiny-1.0.0/../evil.json",
        "/etc/evil.json",
        "other/manifest.json",
        "tiny-1.0.0/learned/classifier.json/x.json",
        "tiny-1.0.0/" + "n" * 300,
    ]
)
KINDS = st.sampled_from(
    [tarfile.REGTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.DIRTYPE, tarfile.FIFOTYPE, tarfile.GNUTYPE_SPARSE]
)


@st.composite
def tar_streams(draw: st.DrawFn) -> bytes:
    data = bytearray(TAR)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "header", "append", "append"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif op == "cut":
            data = data[:at]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=600))
        elif op == "header":  # rewrite a field of a header block: name, size, type, link, ustar magic
            block = (at // 512) * 512
            field = draw(st.sampled_from([(0, 100), (124, 12), (156, 1), (157, 100), (257, 6)]))
            start, width = block + field[0], field[1]
            data[start : start + width] = draw(st.binary(min_size=width, max_size=width))
        else:
            name = draw(NAMES)
            blob = draw(st.sampled_from([b"{}", b'{"format": "workbench-bundle"}', bytes(5000)]))
            member = _member(name, blob, draw(KINDS), "/etc/passwd")
            cut = min(END, len(data))
            data[cut:cut] = member
    return bytes(data)


def _check(blob: bytes, name: str) -> None:
    with tempfile.TemporaryDirectory(prefix="wb-fuzz-") as holder:
        sandbox = Path(holder)
        archive = sandbox / "in" / "tiny-1.0.0.tar.gz"
        archive.parent.mkdir()
        archive.write_bytes(blob)
        cache = sandbox / "cache"
        with watch_opens() as opened:
            runtime = refused_or(name, lambda: load_bundle(archive, {"extract_dir": str(cache)}))
        reads_within(opened, sandbox, sandbox)
        outside = [p for p in sandbox.rglob("*") if not (p.is_relative_to(cache) or p.is_relative_to(archive.parent))]
        assert not outside, f"written outside the extract directory: {outside[:3]}"
        entries = list(cache.iterdir()) if cache.exists() else []
        assert all(ENTRY.match(p.name) for p in entries), f"left behind: {[p.name for p in entries]}"
        if runtime is None:
            assert not entries, "a refused archive left an extraction behind"
            return
        assert verify_bundle_dir(runtime.root) == runtime.manifest  # exactly what its manifest verifies


@given(stream=tar_streams())
def test_mutated_tar_streams(stream):
    _check(_gzip(stream), "archive tar stream")


@given(
    edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=4),
    tail=st.binary(max_size=64),
)
def test_mutated_gzip_bytes(edits, tail):
    blob = bytearray(ARCHIVE.read_bytes())
    for where, value in edits:
        blob[int(where * len(blob))] = value
    _check(bytes(blob) + tail, "archive gzip bytes")
