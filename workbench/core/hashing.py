"""Stable content hashes for configs, files and directories (used as cache keys and fingerprints)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from workbench.core.atomic import atomic_write_json


def canonical_json(obj: Any) -> str:
    """Serialise ``obj`` deterministically: sorted keys, no whitespace, non-JSON values via ``str``."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def stable_hash(obj: Any, length: int = 16) -> str:
    """Hex sha256 of the canonical JSON of ``obj``, truncated to ``length`` characters."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()[:length]


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    """Full hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def tree_sha256(root: str | Path) -> dict[str, str]:
    """Map every regular file below ``root`` (relative POSIX path) to its sha256, in sorted order."""
    root = Path(root)
    return {path.relative_to(root).as_posix(): file_sha256(path) for path in sorted(root.rglob("*")) if path.is_file()}


def tree_fingerprint(root: str | Path) -> str:
    """One hash over the names and contents of every file below ``root``."""
    return stable_hash(tree_sha256(root))


MEMO_MIN_BYTES = 1 << 20
"""Files at least this large have their digest memoised (:func:`path_sha256`); smaller ones are read every time, so
a small file rewritten within the filesystem's timestamp resolution is never taken for its old self."""


def path_sha256(path: str | Path) -> str:
    """Full hex sha256 of what a path holds: a file's bytes, or for a directory every regular file below it (its
    relative POSIX name and its own sha256, in sorted order), links followed. What a stage key holds for a
    path-valued setting, so editing the file, or any file of the directory, changes the key.

    Files of at least :data:`MEMO_MIN_BYTES` (model weights) are hashed once per version: their digest is memoised in
    the workbench cache (``hashes/files.json``) by resolved path, size, modification time and inode. FileNotFoundError
    when ``path`` does not exist."""
    root = Path(path)
    if root.is_file():
        return _memoised_sha256([root])[0]
    if not root.is_dir():
        raise FileNotFoundError(str(root))
    files = sorted(p for p in root.rglob("*") if p.is_file())
    digests = _memoised_sha256(files)
    listing = "".join(f"{p.relative_to(root).as_posix()}\0{d}\n" for p, d in zip(files, digests, strict=True))
    return hashlib.sha256(listing.encode("utf-8")).hexdigest()


def _memoised_sha256(files: list[Path]) -> list[str]:
    """:func:`file_sha256` of each file, large ones through the memo (see :func:`path_sha256`)."""
    large = [f for f in files if f.stat().st_size >= MEMO_MIN_BYTES]
    if not large:
        return [file_sha256(f) for f in files]
    from workbench.core.paths import cache_dir

    memo_path = cache_dir("hashes") / "files.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    memo = memo if isinstance(memo, dict) else {}
    out, changed = [], False
    for file in files:
        stat = file.stat()
        if stat.st_size < MEMO_MIN_BYTES:
            out.append(file_sha256(file))
            continue
        key = f"{file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ino}"
        if not isinstance(memo.get(key), str):
            memo[key], changed = file_sha256(file), True
        out.append(memo[key])
    if changed:
        atomic_write_json(memo_path, memo)
    return out
