"""Where archives are unpacked: one directory per archive digest, checked against the archive on every load, bounded.

A ``.tar.gz`` bundle is unpacked into ``<cache>/<first 32 hex of the archive's sha256>/`` (``<cache>`` is the
workbench cache's ``bundles/`` folder, or ``extract_dir``). The archive, not the cache, is the source of truth: on
every load the archive's first pass (:func:`~workbench.bundle.archive.scan_archive`, which reads its manifest) runs
again, and a cached copy is used only when its ``manifest.json`` has the archive's bytes and every file verifies
against it (:func:`~workbench.bundle.integrity.verify_bundle_dir`). A copy that was replaced or altered is unpacked
again (a quarter of a second for the quickstart bundle).

The cache is bounded: after each new extraction, entries unused for :data:`MAX_AGE_S` are removed, then the least
recently used ones until the total is under :data:`MAX_CACHE_BYTES` (the entry just made is kept), and temporary
folders of an interrupted extraction are cleared. :func:`prune_extract_cache` with zero bounds empties it
(``workbench bundles --prune``). Only folders this module makes are ever removed: 32 hexadecimal digits, or the
``.<digest>.*.tmp`` / ``.old-`` folders of an atomic swap.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.bundle.archive import ArchiveLimits, check_archive_size, extract_archive, scan_archive
from workbench.bundle.integrity import verify_bundle_dir
from workbench.bundle.schema import MANIFEST
from workbench.core.errors import DataError

MAX_CACHE_BYTES = 2 << 30
"""Total size the extract cache is trimmed to after each new extraction."""

MAX_AGE_S = 30 * 24 * 3600
"""Entries not used for this long are removed after each new extraction."""

STALE_TMP_S = 3600
"""A temporary folder of an extraction older than this was left by an interrupted process."""

_ENTRY = re.compile(r"^[0-9a-f]{32}$")
_TEMPORARY = re.compile(r"^\.[0-9a-f]{32}\.(.+\.tmp|old-\d+)$")


def archive_digest(path: Path, max_bytes: int) -> str:
    """Hex sha256 of the archive at ``path`` (its size is checked first, before a byte of it is read)."""
    check_archive_size(path, max_bytes)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def unpacked(archive: Path, base: Path, limits: ArchiveLimits) -> tuple[Path, dict[str, Any]]:
    """``(directory, manifest)`` of the archive unpacked under ``base`` (see the module docstring)."""
    base.mkdir(parents=True, exist_ok=True)
    root = base / archive_digest(archive, limits.max_bytes)[:32]
    scan = scan_archive(archive, limits)
    if root.is_dir():
        try:
            if (root / MANIFEST).read_bytes() == scan.manifest_bytes:
                manifest = verify_bundle_dir(root)
                os.utime(root)  # recently used: the last to be pruned
                return root, manifest
        except (OSError, DataError):
            pass  # replaced or altered since it was unpacked: unpack it again
    extract_archive(archive, root, limits=limits, scan=scan)
    manifest = verify_bundle_dir(root)
    prune_extract_cache(base, keep=root)
    return root, manifest


@dataclass
class Pruned:
    """What :func:`prune_extract_cache` removed: folders and bytes; and what is left."""

    removed: int
    freed_bytes: int
    kept: int
    kept_bytes: int


def _size(path: Path) -> int:
    total = 0
    for current, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(current, name)).st_size
    return total


def prune_extract_cache(
    base: Path, *, max_bytes: int = MAX_CACHE_BYTES, max_age_s: float = MAX_AGE_S, keep: Path | None = None
) -> Pruned:
    """Trim the extract cache at ``base``: remove entries unused for ``max_age_s``, then the least recently used until
    the rest fits in ``max_bytes``, and stale temporary folders; ``keep`` is never removed. Zero bounds empty it."""
    now = time.time()
    removed = freed = 0
    if not base.is_dir():
        return Pruned(0, 0, 0, 0)
    entries: list[tuple[float, int, Path]] = []
    for child in base.iterdir():
        if child.is_symlink() or not child.is_dir():
            continue
        try:
            mtime = child.stat().st_mtime
        except OSError:
            continue
        if _TEMPORARY.match(child.name):
            if now - mtime > min(STALE_TMP_S, max_age_s) or max_age_s == 0:
                freed += _size(child)
                shutil.rmtree(child, ignore_errors=True)
                removed += 1
            continue
        if _ENTRY.match(child.name) and (child / MANIFEST).is_file():
            entries.append((mtime, _size(child), child))
    entries.sort(key=lambda e: e[0], reverse=True)  # most recently used first
    total = 0
    kept = kept_bytes = 0
    for mtime, size, path in entries:
        is_kept = keep is not None and path == keep
        if not is_kept and (now - mtime > max_age_s or total + size > max_bytes):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
            freed += size
            continue
        total += size
        kept += 1
        kept_bytes += size
    return Pruned(removed, freed, kept, kept_bytes)
