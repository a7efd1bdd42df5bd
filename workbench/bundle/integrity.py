"""Check a bundle directory before anything in it is parsed: the manifest, then every file's size and sha256.

:func:`verify_bundle_dir` is the gate every load goes through. In order: the manifest must be a regular file under
:data:`~workbench.bundle.schema.MAX_MANIFEST_BYTES`, valid JSON, of this format and a readable schema major; the
tree must hold exactly the files the manifest lists (a missing file, an extra file, a symlink or any non-regular
file is refused), each with an allowed suffix, its recorded size and its recorded sha256; no feature may require the
gold answer and no gold-using method may be listed. Only then does the loader parse a learned file. Each refusal is
one :class:`~workbench.core.errors.DataError` naming the file.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from workbench.bundle.manifest import check_content_digest, check_manifest, referenced_files
from workbench.bundle.schema import ALLOWED_SUFFIXES, MANIFEST, MAX_MANIFEST_BYTES, check_schema
from workbench.core.errors import DataError


def gold_methods() -> frozenset[str]:
    """Methods that read the gold answer (their spec says ``gold``): never in a bundle."""
    from workbench.methods.registry import METHOD_TABLE

    return frozenset(name for name, spec in METHOD_TABLE.items() if spec.gold)


def safe_relative(name: str, where: str) -> PurePosixPath:
    """``name`` as a relative POSIX path with no ``..``, no absolute root, no backslashes or empty parts."""
    path = PurePosixPath(name)
    if (
        not name
        or "\\" in name
        or path.is_absolute()
        or any(part in ("", ".", "..") for part in name.split("/"))
        or ":" in path.parts[0]
    ):
        raise DataError(f"unsafe path {name!r} (absolute, '..', or not a plain relative path)", where)
    return path


def file_digest(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def file_table(root: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """``{name: {"sha256", "size"}}`` for the files ``names`` below ``root`` (what a manifest lists)."""
    return {name: {"sha256": file_digest(root / name), "size": (root / name).stat().st_size} for name in sorted(names)}


def read_manifest(root: Path) -> dict[str, Any]:
    """The parsed manifest of the bundle at ``root``: a regular file under the size cap, strict JSON (no duplicate
    keys, NaN or runaway nesting), a readable schema, every block typed (:mod:`workbench.bundle.manifest`) and its
    ``content_sha256`` recomputed. DataError (one line naming the file and field) otherwise."""
    path = root / MANIFEST
    where = str(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise DataError("no manifest.json: not a bundle directory", str(root)) from None
    except OSError as exc:
        raise DataError(f"cannot read manifest.json ({type(exc).__name__})", where) from None
    if not stat.S_ISREG(info.st_mode):
        raise DataError("manifest.json is not a regular file", where)
    if info.st_size > MAX_MANIFEST_BYTES:
        raise DataError(f"manifest.json is {info.st_size} bytes (limit {MAX_MANIFEST_BYTES})", where)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read manifest.json ({type(exc).__name__})", where) from None
    return parse_manifest(data, where)


def manifest_notes(manifest: dict[str, Any], where: str) -> list[str]:
    """What a reader should know about a manifest :func:`parse_manifest` accepted: a newer minor schema, fields this
    workbench ignores. Its methods' options are not validated again (parse_manifest did)."""

    return check_schema(manifest, where) + check_manifest(manifest, where, method_options=False)


def parse_manifest(data: bytes, where: str) -> dict[str, Any]:
    """A manifest from its bytes (what :func:`read_manifest` checks, for a manifest read out of an archive too)."""
    from workbench.core.strict_json import loads_strict

    if len(data) > MAX_MANIFEST_BYTES:
        raise DataError(f"manifest.json is over the limit of {MAX_MANIFEST_BYTES} bytes", where)
    manifest = loads_strict(data, where)
    if not isinstance(manifest, dict):
        raise DataError("manifest.json must hold a JSON object", where)
    check_schema(manifest, where)
    check_manifest(manifest, where)
    check_content_digest(manifest, where)
    return manifest


def _tree(root: Path) -> dict[str, os.stat_result]:
    """Every entry below ``root`` (relative POSIX path → lstat), without following links."""
    out: dict[str, os.stat_result] = {}
    for current, dirs, files in os.walk(root, followlinks=False):
        for name in [*dirs, *files]:
            full = Path(current) / name
            out[full.relative_to(root).as_posix()] = os.lstat(full)
    return out


def verify_bundle_dir(root: str | Path) -> dict[str, Any]:
    """Verify the bundle at ``root`` (see the module docstring); returns its manifest. DataError when refused."""
    root = Path(root)
    if not root.is_dir():
        raise DataError("not a bundle directory", str(root))
    manifest = read_manifest(root)
    listed = manifest.get("files")
    if not isinstance(listed, dict) or not listed:
        raise DataError("the manifest lists no files", str(root / MANIFEST))
    entries = _tree(root)
    for name, info in entries.items():
        if stat.S_ISLNK(info.st_mode):
            raise DataError("links are not allowed in a bundle", str(root / name))
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            raise DataError("only regular files and directories are allowed in a bundle", str(root / name))
    present = {n for n, info in entries.items() if stat.S_ISREG(info.st_mode) and n != MANIFEST}
    extra = sorted(present - set(listed))
    if extra:
        raise DataError(f"file(s) not listed in the manifest: {', '.join(extra)}", str(root))
    for name, record in sorted(listed.items()):
        where = str(root / name)
        safe_relative(name, where)
        if not name.endswith(ALLOWED_SUFFIXES):
            raise DataError(f"file type not allowed in a bundle (allowed: {', '.join(ALLOWED_SUFFIXES)})", where)
        if name not in present:
            raise DataError("listed in the manifest but missing", where)
        if not isinstance(record, dict) or not isinstance(record.get("sha256"), str):
            raise DataError("the manifest's entry needs sha256 and size", where)
        if entries[name].st_size != record.get("size"):
            raise DataError(f"size {entries[name].st_size} differs from the manifest's {record.get('size')}", where)
        if file_digest(root / name) != record["sha256"]:
            raise DataError("sha256 differs from the manifest's: the file was altered", where)
    for name, value in referenced_files(manifest):
        if not isinstance(value, str) or value not in listed:
            shown = repr(value)[:200]
            raise DataError(
                f"'{name}' names {shown}, which is not a file the manifest lists (and verifies)", str(root / MANIFEST)
            )
    check_gold_free(manifest, str(root / MANIFEST))
    return manifest


def check_gold_free(manifest: dict[str, Any], where: str) -> None:
    """Refuse a manifest that names a feature with ``requires_gold`` or a gold-using method."""
    features = manifest.get("features", [])
    if not isinstance(features, list):
        raise DataError("'features' must be a list", where)
    gold = [f.get("name") for f in features if isinstance(f, dict) and f.get("requires_gold") is not False]
    if gold:
        raise DataError(f"feature(s) {gold} require the gold answer (or do not say): not allowed in a bundle", where)
    methods = manifest.get("methods", {})
    if not isinstance(methods, dict):
        raise DataError("'methods' must be a mapping", where)
    leaked = sorted(gold_methods() & set(methods))
    if leaked:
        raise DataError(f"method(s) {leaked} read the gold answer: not allowed in a bundle", where)
    for name, spec in methods.items():
        if isinstance(spec, dict) and spec.get("requires_gold"):
            raise DataError(f"method {name!r} requires the gold answer: not allowed in a bundle", where)
