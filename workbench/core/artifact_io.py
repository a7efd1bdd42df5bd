"""Reading and writing learned artifacts: one JSON document per artifact, plus a safetensors file for big tensors.

The file format every learned artifact shares (calibrators, classifiers, the LARS scorer, the utility predictor, a
LoRA adapter): ``<name>.json`` holds a JSON object with a string ``"kind"``, an integer ``"version"`` and the
artifact's parameters; an artifact with large tensors also has ``<name>.safetensors`` next to it, named in the JSON
under ``"tensors": {"file": ..., "sha256": ...}``. Nothing else is ever read: no pickle, no code. Which class a
``kind`` becomes is decided by the reader's own fixed table (:mod:`workbench.methods.learned`), never by the file.

This module only moves bytes and checks the envelope (layer 1: no ML import; safetensors' numpy reader is imported
when a tensor file is read).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.core.atomic import atomic_write_bytes, atomic_write_text
from workbench.core.errors import DataError
from workbench.core.strict_json import loads_strict

TENSORS_KEY = "tensors"


def envelope_check(payload: Any, where: str) -> dict[str, Any]:
    """``payload`` if it is a JSON object with a string ``kind`` and an integer ``version``; DataError otherwise."""
    if not isinstance(payload, dict):
        raise DataError(f"expected a JSON object, got {type(payload).__name__}", where)
    kind, version = payload.get("kind"), payload.get("version")
    if not isinstance(kind, str) or not kind:
        raise DataError("missing or non-string 'kind'", where)
    if isinstance(version, bool) or not isinstance(version, int):
        raise DataError(f"missing or non-integer 'version' (got {version!r})", where)
    return payload


def write_artifact(path: str | Path, payload: dict[str, Any], tensors: dict[str, Any] | None = None) -> list[Path]:
    """Write ``payload`` as ``path`` (JSON, sorted keys) and, when ``tensors`` (name → numpy array) is non-empty,
    ``path.with_suffix(".safetensors")``; both atomically. Returns the written paths (JSON last).

    The JSON is byte-identical for identical inputs (sorted keys, no timestamps), so re-exports hash the same.
    """
    path = Path(path)
    envelope_check(payload, str(path))
    if TENSORS_KEY in payload:
        raise DataError(f"'{TENSORS_KEY}' is reserved for the tensor file reference", str(path))
    written: list[Path] = []
    document = dict(payload)
    if tensors:
        import numpy as np
        from safetensors.numpy import save

        blob = save({k: np.ascontiguousarray(v) for k, v in sorted(tensors.items())})
        tensor_path = path.with_suffix(".safetensors")
        written.append(atomic_write_bytes(tensor_path, blob))
        document[TENSORS_KEY] = {"file": tensor_path.name, "sha256": hashlib.sha256(blob).hexdigest()}
    text = json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
    written.append(atomic_write_text(path, text))
    return written


MAX_ARTIFACT_JSON_BYTES = 256 << 20
"""Largest artifact JSON read (the workbench's own are a few MB at most: tensors live in the safetensors file)."""


def read_artifact(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(payload, tensors)`` of an artifact written by :func:`write_artifact`; DataError on anything malformed.

    ``tensors`` is empty unless the JSON names a tensor file, which must sit next to it, match its sha256 and be a
    safetensors file (read with safetensors' numpy reader: plain arrays, no code).
    """
    path = Path(path)
    where = str(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_ARTIFACT_JSON_BYTES + 1)
    except FileNotFoundError:
        raise DataError("file not found", where) from None
    except OSError as exc:
        raise DataError(f"not a readable JSON artifact ({type(exc).__name__}: {exc})", where) from None

    def sibling(name: str) -> bytes:
        try:
            return (path.parent / name).read_bytes()
        except OSError:
            raise DataError(f"tensor file {name} is missing", where) from None

    return parse_artifact(data, where, sibling)


def parse_artifact(
    data: bytes, where: str, read_sibling: Callable[[str], bytes]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(payload, tensors)`` from an artifact's JSON bytes; ``read_sibling(name)`` returns the bytes of the tensor
    file the JSON names (a bundle loader passes a reader of verified bytes). The JSON is read strictly (no duplicate
    keys, NaN or runaway nesting: :mod:`workbench.core.strict_json`); DataError naming ``where`` on anything wrong."""

    if len(data) > MAX_ARTIFACT_JSON_BYTES:
        raise DataError(f"artifact JSON over the limit of {MAX_ARTIFACT_JSON_BYTES} bytes", where)
    payload = loads_strict(data, where)
    envelope_check(payload, where)
    reference = payload.pop(TENSORS_KEY, None)
    if reference is None:
        return payload, {}
    if not isinstance(reference, dict) or set(reference) != {"file", "sha256"}:
        raise DataError(f"'{TENSORS_KEY}' must be {{file, sha256}}", where)
    name = reference["file"]
    if not isinstance(name, str) or Path(name).name != name or not name.endswith(".safetensors"):
        raise DataError(f"tensor file {name!r} must be a .safetensors file next to the JSON", where)
    blob = read_sibling(name)
    if hashlib.sha256(blob).hexdigest() != reference["sha256"]:
        raise DataError(f"{name} does not match the sha256 recorded in {Path(where).name}", where)
    from safetensors.numpy import load

    try:
        tensors = load(blob)
    except Exception as exc:  # safetensors raises its own error types for malformed headers
        raise DataError(f"{name} is not a valid safetensors file ({exc})", where) from None
    return payload, tensors
