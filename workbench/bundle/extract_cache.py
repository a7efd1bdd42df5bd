"""Where archives are unpacked: one directory per archive digest, checked against the archive on every load, bounded.

A ``.tar.gz`` bundle is unpacked into ``<cache>/<first 32 hex of the archive's sha256>/`` (``<cache>`` is the
workbench cache's ``bundles/`` folder, or ``extract_dir``). The archive, not the cache, is the source of truth: on
every load the archive's first pass (:func:`~workbench.bundle.archive.scan_archive`, which reads its manifest) runs
again, and a cached copy is used only when its ``manifest.json`` has the archive's bytes and every file verifies
against it (:func:`~workbench.bundle.integrity.verify_bundle_dir`). A copy that was replaced or altered is unpacked
again (a quarter of a second for the quickstart bundle).

The cache is bounded: after each new extraction, entries unused for :data:`MAX_AGE_S` are removed, then the least
recently used ones until the total is under :data:`MAX_CACHE_BYTES` (the entry just made is kept), and temporary
folders an interrupted extraction left (older than :data:`STALE_TMP_S`) are cleared. :func:`prune_extract_cache` with
zero bounds empties it (``workbench bundles --prune``). Only folders this module makes are ever removed: 32
hexadecimal digits, or the ``.<digest>.*.tmp`` / ``.old-`` folders of an atomic swap.

**An entry in use is never removed.** Each loaded bundle holds an :class:`ExtractLease` on its entry: a shared
``flock`` on the entry's directory, taken before the entry is verified and held as long as the runtime lives
(``rt.extract_lease.release()`` lets it go sooner). Pruning takes an exclusive lock, without waiting, on each entry
it would remove and skips the ones it cannot lock, in this process and in any other (a runtime reads some files
after loading: a distilled controller's adapter on its first answer). A loader that waited on a lock while its entry
was being removed sees the directory gone and unpacks it again. On a system without ``flock`` (Windows) entries are
not leased.

A cache that cannot be written (a read-only mount, a full disk) is reported in one line naming it; an entry it
already holds still loads.
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

from workbench.bundle.archive import ArchiveLimits, check_archive_size, describe_os_error, extract_archive, scan_archive
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


class ExtractLease:
    """A shared lock on one extract-cache entry, held while a runtime uses it: :func:`prune_extract_cache` never
    removes a locked entry. :meth:`release` (or garbage collection) lets it go. Where the system has no ``flock``
    (Windows), a lease holds nothing and pruning cannot tell an entry in use."""

    def __init__(self, fd: int | None, root: Path) -> None:
        self.fd = fd
        self.root = root

    @classmethod
    def take(cls, root: Path) -> ExtractLease | None:
        """A lease on ``root``, waiting while a pruner holds it; None when ``root`` is (or meanwhile went) missing."""
        if _fcntl() is None:
            return cls(None, root) if root.is_dir() else None
        fd = _open_directory(root)
        if fd is None:
            return None
        lease = cls(fd, root)
        try:
            _fcntl().flock(fd, _fcntl().LOCK_SH)
            if os.fstat(fd).st_ino != os.stat(root).st_ino:  # removed (and perhaps unpacked again) while we waited
                raise FileNotFoundError(root)
        except OSError:
            lease.release()
            return None
        return lease

    def release(self) -> None:
        """Let the entry go (pruning may remove it from now on)."""
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    def __del__(self) -> None:
        self.release()


def _fcntl() -> Any:
    """The ``fcntl`` module, or None on a system without it."""
    try:
        import fcntl
    except ImportError:
        return None
    return fcntl


def _open_directory(path: Path) -> int | None:
    """A read-only descriptor of the directory ``path`` (what ``flock`` locks), or None when it cannot be opened."""
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return None


def unpacked(archive: Path, base: Path, limits: ArchiveLimits) -> tuple[Path, dict[str, Any], ExtractLease | None]:
    """``(directory, manifest, lease)`` of the archive unpacked under ``base`` (see the module docstring); the lease
    keeps the directory from being pruned while the caller holds it."""
    try:
        if not base.is_dir():
            base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"cannot create the extract directory ({describe_os_error(exc)})", str(base)) from None
    root = base / archive_digest(archive, limits.max_bytes)[:32]
    scan = scan_archive(archive, limits)
    for _ in range(3):  # another process may prune or replace the entry between our steps: a few tries
        lease = ExtractLease.take(root)
        if lease is not None:
            try:
                if (root / MANIFEST).read_bytes() == scan.manifest_bytes:
                    manifest = verify_bundle_dir(root)
                    with contextlib.suppress(OSError):  # a read-only cache still serves what it holds
                        os.utime(root)  # recently used: the last to be pruned
                    return root, manifest, lease
            except (OSError, DataError):
                pass  # replaced or altered since it was unpacked: unpack it again
            lease.release()
        extract_archive(archive, root, limits=limits, scan=scan)
        lease = ExtractLease.take(root)
        if lease is None:
            continue  # pruned by another process before we could lease it
        manifest = verify_bundle_dir(root)
        prune_extract_cache(base, max_bytes=MAX_CACHE_BYTES, max_age_s=MAX_AGE_S, keep=root)
        return root, manifest, lease
    raise DataError("the extract cache's copy of the archive keeps being removed: retry, or set extract_dir", str(base))


@dataclass
class Pruned:
    """What :func:`prune_extract_cache` removed: folders and bytes; and what is left (``in_use``: entries it would
    have removed but a loaded bundle holds)."""

    removed: int
    freed_bytes: int
    kept: int
    kept_bytes: int
    in_use: int = 0


def _remove_unless_leased(path: Path) -> bool:
    """Remove the entry ``path`` unless a loaded bundle holds a lease on it (an exclusive lock it cannot take without
    waiting); whether it was removed."""
    fcntl = _fcntl()
    fd = _open_directory(path) if fcntl is not None else None
    if fcntl is not None:
        if fd is None:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # BlockingIOError: leased
            os.close(fd)
            return False
    try:
        shutil.rmtree(path, ignore_errors=True)
    finally:
        if fd is not None:
            os.close(fd)
    return True


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
    the rest fits in ``max_bytes``, and temporary folders older than :data:`STALE_TMP_S`; ``keep`` and every entry a
    loaded bundle leases are never removed. Zero bounds empty it of all but those."""
    now = time.time()
    removed = freed = in_use = 0
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
            if now - mtime > STALE_TMP_S:  # a younger one may be an extraction under way
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
            if _remove_unless_leased(path):
                removed += 1
                freed += size
                continue
            in_use += 1
        total += size
        kept += 1
        kept_bytes += size
    return Pruned(removed, freed, kept, kept_bytes, in_use)
