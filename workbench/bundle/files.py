"""The one way a loader reads a file a bundle names: only files the manifest lists, only bytes whose sha256 matches.

A manifest names its learned files in several blocks (``decision.files``, ``utility.file``,
``controller_adapter.file``, and whatever a later schema adds). :class:`BundleFiles` resolves every such name the
same way: it must be a safe relative path (no root, no ``..``, no backslash) **and a key of the manifest's
``files`` table**; anything else — an absolute path, ``../elsewhere.onnx``, ``/etc/passwd``, a file that is in the
tree but not listed — is refused before a byte of it is read. :meth:`BundleFiles.read` then reads the file once and
checks its size and sha256 against the table *on those very bytes*, so what is parsed is what was verified, even if
the file changes on disk between the directory check and the parse.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

from workbench.bundle.integrity import safe_relative
from workbench.core.artifact_io import parse_artifact
from workbench.core.errors import DataError
from workbench.methods.learned import load_learned_bytes


class BundleFiles:
    """Verified access to the files of the bundle at ``root`` with the (already read) ``manifest``."""

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root = Path(root)
        self.manifest = manifest
        listed = manifest.get("files")
        self.listed: dict[str, Any] = listed if isinstance(listed, dict) else {}
        self.where = str(self.root / "manifest.json")

    def name(self, value: Any, field: str) -> str:
        """``value`` (the manifest's ``field``) if it names a listed file; DataError naming the field otherwise."""
        if not isinstance(value, str):
            raise DataError(f"'{field}' must name a file of the bundle, got {type(value).__name__}", self.where)
        safe_relative(value, f"{self.where}: {field}")
        if value not in self.listed:
            raise DataError(
                f"'{field}' names {value[:200]!r}, which is not one of the files the manifest lists (and verifies)",
                self.where,
            )
        return value

    def read(self, value: Any, field: str) -> bytes:
        """The bytes of the listed file ``value`` (named by ``field``), read once and checked against the manifest's
        size and sha256; DataError when it is not listed, not a regular file, or its bytes differ."""
        name = self.name(value, field)
        path = self.root / name
        record = self.listed[name]
        try:
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode):
                raise DataError("not a regular file", str(path))
            with open(path, "rb") as handle:
                data = handle.read(int(record["size"]) + 1)
        except OSError as exc:
            raise DataError(f"cannot read the file ({type(exc).__name__})", str(path)) from None
        if len(data) != record["size"] or hashlib.sha256(data).hexdigest() != record["sha256"]:
            raise DataError("the file differs from the manifest's size or sha256: it was altered", str(path))
        return data

    def path(self, value: Any, field: str) -> Path:
        """The path of the listed file ``value`` after checking its bytes (for a reader that needs a path, such as
        the adapter loader); a learned JSON's tensor file must be listed and intact too."""

        name = self.name(value, field)
        data = self.read(name, field)
        if name.endswith(".json"):
            parent = os.path.dirname(name)
            parse_artifact(data, str(self.root / name), lambda other: self.read(_join(parent, other), field))
        return self.root / name

    def learned(self, value: Any, field: str, expect: set[str] | frozenset[str]) -> Any:
        """The learned artifact (:mod:`workbench.methods.learned`) in the listed JSON file ``value``, parsed from its
        verified bytes; its tensor file, if any, read the same way."""

        name = self.name(value, field)
        parent = os.path.dirname(name)
        data = self.read(name, field)
        return load_learned_bytes(
            data, str(self.root / name), lambda other: self.read(_join(parent, other), field), expect
        )


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name
