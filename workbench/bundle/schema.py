"""The bundle format: its schema version, file layout, limits, and the compatibility rule.

A bundle is a directory ``<name>/<version>/`` (and the same files in one ``.tar.gz``)::

    manifest.json              what the bundle is (see docs/bundles.md): provenance, models, features, stats
                               settings, the decision rule, per-method settings, held-out metrics, and every other
                               file with its sha256 and size
    README.md                  the model card
    learned/calibrators.json   the calibrator set (features, fit-split medians and ranges, one calibrator each)
    learned/classifier.json    the decision classifier's weights (numpy path; a k-NN's reference points beside it,
                               learned/classifier.safetensors)
    learned/classifier.onnx    the whole decision as an ONNX graph (ONNX Runtime path): raw features in, the imputation
                               and the calibrators inside, P(correct) and retrieve = P < τ out (bundles before it:
                               the classifier alone, reading the calibrated features)
    learned/lars.json          the LARS scorer (when ``lars`` is a feature)
    learned/ood.json (+ .safetensors)   the OOD flag: the fit split's profile and its calibrated threshold, the fit
                               questions' embeddings beside it (docs/ood.md; when the calibrate stage fitted one)
    learned/utility.json       D²-RAG's utility predictor (when the run fitted one)
    learned/adapter.json (+ .safetensors)   a distilled controller adapter (when the run has one), and beside it
                               the same adapter for peft: adapter_config.json, adapter_model.safetensors, README.md
    monitoring/reference.json  the reference distributions of drift monitoring (schema 1.6; docs/monitoring.md):
                               the decision features, P(correct), retrieval and OOD rates on the calibration split
    plots/*.png                figures of the model card

A version written by ``workbench recalibrate`` is its parent with ``learned/calibrators.json`` (and, when asked, τ and
``learned/classifier.json``) refitted on feedback, the decision graph rebuilt, the monitoring reference rebuilt from the
feedback and a ``recalibration`` block in the manifest (schema 1.7; :mod:`workbench.recalibration`).

**Compatibility.** ``schema_version`` is ``"MAJOR.MINOR"``. A minor version adds optional fields only, so a reader
accepts every minor of its own major (fields it does not know are ignored, and listed in the runtime's notes); a
different major is refused with the workbench version that reads it. Only the suffixes in :data:`ALLOWED_SUFFIXES`
may appear: JSON, ONNX, safetensors, Markdown and PNG — nothing that can hold code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from workbench import __version__
from workbench.core.errors import DataError

FORMAT = "workbench-bundle"
SCHEMA_MAJOR = 1
SCHEMA_MINOR = 7
SCHEMA_VERSION = f"{SCHEMA_MAJOR}.{SCHEMA_MINOR}"
IDENTITY_MINOR = 3
"""The first minor whose manifests seal their ``name`` and ``version`` (``identity``, inside the content digest)."""
MANIFEST = "manifest.json"

ALLOWED_SUFFIXES = (".json", ".onnx", ".safetensors", ".md", ".png")
"""The only file types a bundle may hold (no pickle, joblib, torch ``.bin`` / ``.pt``, Python or shell files)."""

MAX_MANIFEST_BYTES = 4 << 20
"""A manifest larger than this is refused before it is parsed."""

MAX_ARCHIVE_BYTES = 1 << 30
"""Default cap on a bundle archive's compressed size (and, separately, its unpacked size)."""

MAX_ARCHIVE_MEMBERS = 10_000

SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def check_name(name: str, where: str = "bundle name") -> str:
    """``name`` if it is a safe bundle name (letters, digits, ``._-``; up to 100 characters); DataError otherwise."""
    if not isinstance(name, str) or not NAME.match(name) or ".." in name:
        raise DataError(f"{name!r} is not a bundle name (letters, digits, '.', '_', '-'; no '..')", where)
    return name


def parse_semver(version: str, where: str = "bundle version") -> tuple[int, int, int]:
    """``(major, minor, patch)`` of a ``X.Y.Z`` version; DataError otherwise."""
    match = SEMVER.match(version) if isinstance(version, str) else None
    if match is None:
        raise DataError(f"{version!r} is not a semantic version X.Y.Z", where)
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def bundle_versions(name_dir: Path) -> list[tuple[tuple[int, int, int], Path]]:
    """``[(semver, directory)]`` of the ``X.Y.Z`` version directories under a bundle's name directory, lowest
    first (numeric order: 1.10.0 after 1.9.3); other entries are ignored."""
    out = []
    if name_dir.is_dir():
        for child in name_dir.iterdir():
            if child.is_dir() and SEMVER.match(child.name):
                out.append((parse_semver(child.name), child))
    return sorted(out)


def schema_minor(manifest: dict[str, Any]) -> int:
    """The minor of a manifest's ``schema_version`` (-1 when it is not ``MAJOR.MINOR``: :func:`check_schema`
    refuses it)."""
    version = manifest.get("schema_version")
    match = re.match(r"^(\d+)\.(\d+)$", version) if isinstance(version, str) else None
    return int(match.group(2)) if match else -1


def check_schema(manifest: dict[str, Any], where: str) -> list[str]:
    """Check the manifest's format and schema version; returns notes (e.g. a newer minor). DataError when refused."""
    if manifest.get("format") != FORMAT:
        raise DataError(f"not a workbench bundle manifest (format {manifest.get('format')!r})", where)
    version = manifest.get("schema_version")
    match = re.match(r"^(\d+)\.(\d+)$", version) if isinstance(version, str) else None
    if match is None:
        raise DataError(f"schema_version {version!r} is not MAJOR.MINOR", where)
    major, minor = int(match.group(1)), int(match.group(2))
    if major != SCHEMA_MAJOR:
        writer = manifest.get("workbench", {}).get("version") if isinstance(manifest.get("workbench"), dict) else None
        writer = writer if isinstance(writer, str) else "unknown"

        advice = (
            f"install workbench {writer} (which wrote it) or a later release that reads schema {major}.x"
            if major > SCHEMA_MAJOR
            else f"re-export the run with this workbench, or load it with workbench {writer}"
        )
        raise DataError(
            f"bundle schema {version} is not readable by workbench {__version__} (reads {SCHEMA_MAJOR}.x): {advice}",
            where,
        )
    if minor > SCHEMA_MINOR:
        return [f"bundle schema {version} is newer than {SCHEMA_VERSION}: fields added since are ignored"]
    return []
