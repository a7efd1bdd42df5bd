"""Stable content hashes for configs, files and directories (used as cache keys and fingerprints)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


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
