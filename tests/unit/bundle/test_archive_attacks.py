"""Issue 41's attacks on bundle archives and the extract cache, one test each.

* Sparse members: a few KB of archive unpacked to hundreds of MB, because a sparse member's holes are zeros tarfile
  writes without reading them, so no cap counted them. Every sparse form tarfile knows (GNU's old ``S`` headers, pax
  sparse 0.0, 0.1 and 1.0) is refused before its map is read, with a manifest that lists the expanded file (the
  attack self-consistent: the old extractor unpacked it and the bundle loaded).
* Trailing data after the gzip stream (or after the tar archive inside it) was ignored: it is refused.
* A full disk or a read-only extract cache was reported as a corrupt archive or a traceback: it is one line saying
  what failed and where; a read-only cache that holds the archive's copy still loads.
"""

from __future__ import annotations

import errno
import hashlib
import io
import tarfile
import tempfile
import zlib
from pathlib import Path

import pytest

from tests.unit.bundle.test_bundle_attacks import _manifest, _reseal
from workbench.bundle import archive as archive_module
from workbench.bundle.archive import write_archive
from workbench.core.errors import DataError
from workbench.runtime import load_bundle

HOLE = "plots/hole.png"
EXPANDED = 3 << 20
"""What the sparse member unpacks to: 3 MiB of which 4 bytes are in the archive."""
STORED = b"\x89PNG"


def _gzip(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


def _padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % tarfile.BLOCKSIZE)


def _regular(name: str, data: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info.tobuf(tarfile.PAX_FORMAT) + _padded(data)


def _old_gnu_sparse(name: str) -> bytes:
    """A GNU ``S`` header: one data run of ``STORED`` at offset 0, real size ``EXPANDED``."""
    info = tarfile.TarInfo(name)
    info.size, info.type = len(STORED), tarfile.GNUTYPE_SPARSE
    header = bytearray(info.tobuf(tarfile.GNU_FORMAT))
    header[386:398] = tarfile.itn(0, 12, tarfile.GNU_FORMAT)
    header[398:410] = tarfile.itn(len(STORED), 12, tarfile.GNU_FORMAT)
    header[483:495] = tarfile.itn(EXPANDED, 12, tarfile.GNU_FORMAT)
    header[148:156] = b" " * 8
    header[148:155] = b"%06o\0" % sum(header[:512])
    return bytes(header) + _padded(STORED)


def _pax_sparse(name: str, version: str) -> bytes:
    info = tarfile.TarInfo(name)
    data = STORED
    if version == "0.0":
        info.pax_headers = {
            "GNU.sparse.size": str(EXPANDED),
            "GNU.sparse.offset": "0",
            "GNU.sparse.numbytes": str(len(STORED)),
        }
    elif version == "0.1":
        info.pax_headers = {"GNU.sparse.map": f"0,{len(STORED)}", "GNU.sparse.realsize": str(EXPANDED)}
    else:  # 1.0: the map is the start of the member's data
        info.pax_headers = {
            "GNU.sparse.major": "1",
            "GNU.sparse.minor": "0",
            "GNU.sparse.name": name,
            "GNU.sparse.realsize": str(EXPANDED),
        }
        data = _padded(f"1\n0\n{len(STORED)}\n".encode()) + STORED
    info.size = len(data)
    return info.tobuf(tarfile.PAX_FORMAT) + _padded(data)


SPARSE = {
    "gnu-old": _old_gnu_sparse,
    "pax-0.0": lambda name: _pax_sparse(name, "0.0"),
    "pax-0.1": lambda name: _pax_sparse(name, "0.1"),
    "pax-1.0": lambda name: _pax_sparse(name, "1.0"),
}


def _sparse_archive(bundle: Path, path: Path, kind: str) -> Path:
    """The bundle with ``HOLE`` listed at its expanded size and sha256, packed with ``HOLE`` as a sparse member."""
    expanded = STORED + bytes(EXPANDED - len(STORED))
    (bundle / HOLE).write_bytes(expanded)
    manifest = _manifest(bundle)
    manifest["files"][HOLE] = {"sha256": hashlib.sha256(expanded).hexdigest(), "size": EXPANDED}
    _reseal(bundle, manifest)
    stream = b""
    for file in sorted(p for p in bundle.rglob("*") if p.is_file()):
        name = f"tiny-1.0.0/{file.relative_to(bundle).as_posix()}"
        stream += (
            SPARSE[kind](name) if file.relative_to(bundle).as_posix() == HOLE else _regular(name, file.read_bytes())
        )
    path.write_bytes(_gzip(stream + bytes(2 * tarfile.BLOCKSIZE)))
    return path


@pytest.mark.parametrize("kind", list(SPARSE))
def test_a_sparse_member_is_refused_before_its_holes_are_unpacked(bundle, tmp_path, kind):
    archive = _sparse_archive(bundle, tmp_path / "sparse.tar.gz", kind)
    assert archive.stat().st_size < 100_000  # 3 MiB of holes in a few KB
    with tarfile.open(archive) as tar:  # tarfile itself reads it as a 3 MiB file: the attack is well formed
        assert tar.getmember(f"tiny-1.0.0/{HOLE}").size == EXPANDED
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match=r"sparse member .*: not allowed in a bundle") as refused:
        load_bundle(archive, {"extract_dir": str(cache)})
    assert "\n" not in str(refused.value)
    assert not cache.exists() or not any(cache.rglob("*.png"))


# ------------------------------------------------------------------------------------------ trailing data
def _tar_stream(bundle: Path) -> bytes:
    return zlib.decompress(write_archive(bundle, bundle.parent / "plain.tar.gz", "tiny-1.0.0").read_bytes(), 47)


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (lambda gz, tar: gz + b"PK\x03\x04 a zip appended", "data after the end of the gzip stream"),
        (lambda gz, tar: gz + bytes(70_000) + b"x", "data after the end of the gzip stream"),
        (lambda gz, tar: gz + _gzip(b"more data"), "data after the end of the tar archive"),
        (
            lambda gz, tar: _gzip(tar + b"hidden after the end-of-archive blocks"),
            "data after the end of the tar archive",
        ),
    ],
    ids=["garbage", "padding-then-garbage", "second-gzip-member", "inside-the-gzip-stream"],
)
def test_trailing_data_is_refused(bundle, tmp_path, tail, message):
    tar = _tar_stream(bundle)
    archive = tmp_path / "tail.tar.gz"
    archive.write_bytes(tail(_gzip(tar), tar))
    with pytest.raises(DataError, match=message):
        load_bundle(archive, {"extract_dir": str(tmp_path / "cache")})


def test_nul_padding_after_the_gzip_stream_is_still_read(bundle, tmp_path):
    archive = tmp_path / "padded.tar.gz"
    archive.write_bytes(_gzip(_tar_stream(bundle)) + bytes(100_000))  # as a tape-blocking writer pads
    assert load_bundle(archive, {"extract_dir": str(tmp_path / "cache")}).name == "tiny"


# ------------------------------------------------------------------------------------------ write failures
def _failing(code: int):
    def fail(*args, **kwargs):
        raise OSError(code, "injected")

    return fail


class _FullDisk(io.RawIOBase):
    """A file whose first write fails with ENOSPC, as on a full disk."""

    def __init__(self, path) -> None:
        self.path = path

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_is_named_as_such_and_leaves_nothing(bundle, tmp_path, monkeypatch):
    archive = write_archive(bundle, tmp_path / "tiny.tar.gz", "tiny-1.0.0")
    cache = tmp_path / "cache"
    real_open = open

    def open_(path, mode="r", *args, **kwargs):
        return _FullDisk(path) if "x" in mode else real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(archive_module, "open", open_, raising=False)
    with pytest.raises(DataError) as refused:
        load_bundle(archive, {"extract_dir": str(cache)})
    assert str(refused.value) == f"{cache}: cannot unpack the bundle here: no space left on the device"
    assert [p.name for p in cache.iterdir()] == []


def test_a_read_only_extract_cache_is_one_line_naming_it(tmp_path, monkeypatch):
    from tests.unit.bundle.conftest import FIXTURE

    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setattr(tempfile, "mkdtemp", _failing(errno.EROFS))  # what a read-only mount answers
    with pytest.raises(DataError) as refused:
        load_bundle(FIXTURE / "tiny-1.0.0.tar.gz", {"extract_dir": str(cache)})
    assert str(refused.value) == f"{cache}: cannot unpack the bundle here: read-only file system"


def test_an_extract_cache_that_cannot_be_created_is_one_line(tmp_path, monkeypatch):
    import os

    from tests.unit.bundle.conftest import FIXTURE

    monkeypatch.setattr(os, "mkdir", _failing(errno.EROFS))
    cache = tmp_path / "read-only" / "cache"
    with pytest.raises(DataError) as refused:
        load_bundle(FIXTURE / "tiny-1.0.0.tar.gz", {"extract_dir": str(cache)})
    assert str(refused.value) == f"{cache}: cannot create the extract directory (read-only file system)"


def test_a_read_only_cache_holding_the_archives_copy_still_loads(tmp_path, monkeypatch):
    import os

    from tests.unit.bundle.conftest import FIXTURE

    cache = tmp_path / "cache"
    first = load_bundle(FIXTURE / "tiny-1.0.0.tar.gz", {"extract_dir": str(cache)})
    for name in ("utime", "mkdir", "rename", "replace"):
        monkeypatch.setattr(os, name, _failing(errno.EROFS))
    monkeypatch.setattr(tempfile, "mkdtemp", _failing(errno.EROFS))
    again = load_bundle(FIXTURE / "tiny-1.0.0.tar.gz", {"extract_dir": str(cache)})
    assert again.root == first.root and again.manifest == first.manifest


# ------------------------------------------------------------------------------------------ entries in use
def test_pruning_after_a_new_extraction_keeps_the_entry_a_loaded_bundle_uses(bundle, tmp_path, monkeypatch):
    from workbench.bundle import extract_cache

    cache = tmp_path / "cache"
    first = load_bundle(write_archive(bundle, tmp_path / "a.tar.gz", "tiny-a"), {"extract_dir": str(cache)})
    monkeypatch.setattr(extract_cache, "MAX_CACHE_BYTES", 1)  # every older entry is over the bound
    second = load_bundle(write_archive(bundle, tmp_path / "b.tar.gz", "tiny-b"), {"extract_dir": str(cache)})
    assert first.root != second.root and first.root.is_dir()
    assert first.files.read("learned/classifier.json", "decision.files.classifier")  # still there to be read


def test_an_entry_is_pruned_once_no_loaded_bundle_uses_it(tmp_path):
    import gc

    from tests.unit.bundle.conftest import FIXTURE
    from workbench.bundle.extract_cache import prune_extract_cache

    cache = tmp_path / "cache"
    runtime = load_bundle(FIXTURE / "tiny-1.0.0.tar.gz", {"extract_dir": str(cache)})
    held = prune_extract_cache(cache, max_bytes=0, max_age_s=0)
    assert (held.removed, held.in_use) == (0, 1) and runtime.root.is_dir()
    root = runtime.root
    del runtime
    gc.collect()
    freed = prune_extract_cache(cache, max_bytes=0, max_age_s=0)
    assert (freed.removed, freed.in_use) == (1, 0) and not root.exists()


def test_workbench_bundles_prune_in_another_process_keeps_an_entry_in_use(tmp_path):
    import os
    import subprocess
    import sys

    from tests.unit.bundle.conftest import FIXTURE

    cache = tmp_path / "wb-cache"
    runtime = load_bundle(FIXTURE / "tiny-1.0.0.tar.gz", {"extract_dir": str(cache / "bundles")})
    env = {**os.environ, "WORKBENCH_CACHE_DIR": str(cache)}
    out = subprocess.run(
        [sys.executable, "-m", "workbench", "bundles", "--prune"], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0 and "removed 0 unpacked archive(s)" in out.stdout, out.stdout + out.stderr
    assert "1 in use by a loaded bundle, kept" in out.stdout
    assert runtime.files.read("learned/classifier.json", "decision.files.classifier")


def test_a_load_that_waited_on_a_pruner_unpacks_the_archive_again(tmp_path):
    import fcntl
    import os
    import shutil
    import threading

    from tests.unit.bundle.conftest import FIXTURE

    cache = tmp_path / "cache"
    archive = FIXTURE / "tiny-1.0.0.tar.gz"
    first = load_bundle(archive, {"extract_dir": str(cache)})
    root = first.root
    first.extract_lease.release()
    pruner = os.open(root, os.O_RDONLY)
    fcntl.flock(pruner, fcntl.LOCK_EX)  # a pruner that holds the entry and is about to remove it
    loaded: list = []
    loader = threading.Thread(target=lambda: loaded.append(load_bundle(archive, {"extract_dir": str(cache)})))
    loader.start()
    loader.join(0.3)
    assert loader.is_alive()  # waiting for the pruner, not reading a directory being removed
    shutil.rmtree(root)
    os.close(pruner)
    loader.join(60)
    assert loaded and loaded[0].root == root and (root / "manifest.json").is_file()
