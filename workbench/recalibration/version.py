"""Write a recalibration as a new version of its bundle: ``<name dir>/<X.(Y+1).0>/`` beside the parent.

The new version is the parent with three files rewritten and its manifest re-sealed:

* ``decision.files.calibrators``: the refitted :class:`~workbench.calibration.calibrator_set.CalibratorSet`;
* ``decision.files.classifier_onnx``: the decision graph rebuilt around them (the parent's numpy classifier
  exported by :func:`~workbench.classify.onnx_export.export_onnx`, then
  :func:`~workbench.classify.onnx_decision.export_decision_onnx` with the parent's τ, as export builds it), so the
  runtime's numpy / ONNX agreement check holds;
* ``README.md``: the model card of the new manifest.

Every other file is copied from the parent's verified bytes (:class:`~workbench.bundle.files.BundleFiles`). The
manifest keeps the parent's content, takes this workbench's schema version, the new ``version`` and ``created``,
and gains a ``recalibration`` block (schema 1.7: parent version, feedback sha256, row counts, split, before / after
metrics) and a note; the classifier, τ, the held-out ``metrics`` and the monitoring reference stay the parent's (the
note says so). The version is the next minor above the highest version of the name directory (1.0.0 → 1.1.0).

Atomic: the version is built and verified (:func:`~workbench.bundle.integrity.verify_bundle_dir`) in a temporary
directory beside it and renamed into place; on any failure nothing is left.
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from workbench import __version__
from workbench.bundle.card import model_card
from workbench.bundle.files import BundleFiles
from workbench.bundle.integrity import file_digest, file_table, verify_bundle_dir
from workbench.bundle.manifest import seal
from workbench.bundle.schema import MANIFEST, SCHEMA_VERSION, bundle_versions, check_name, parse_semver
from workbench.calibration.calibrator_set import CalibratorSet
from workbench.classify.onnx_decision import export_decision_onnx
from workbench.classify.onnx_export import export_onnx
from workbench.core.atomic import atomic_write_bytes, atomic_write_text
from workbench.core.errors import DataError
from workbench.methods.learned import CLASSIFIER_KINDS, save_learned
from workbench.recalibration.compare import Recalibration

CARD = "README.md"


def bundle_calibrators(root: str | Path) -> tuple[dict[str, Any], CalibratorSet]:
    """The verified manifest of the bundle directory ``root`` and its calibrator set; DataError when the bundle does
    not verify or has no decision policy (nothing to recalibrate)."""
    root = Path(root)
    manifest = verify_bundle_dir(root)
    decision = manifest.get("decision")
    if not decision:
        raise DataError("the bundle has no decision policy: it has no calibrators to refit", str(root / MANIFEST))
    files = BundleFiles(root, manifest)
    calibrators = files.learned(decision["files"]["calibrators"], "decision.files.calibrators", {"calibrator_set"})
    return manifest, calibrators


def next_version(name_dir: Path, parent: str) -> str:
    """The next minor above the highest of ``parent`` and the versions under ``name_dir``: ``X.(Y+1).0``."""
    major, minor, _ = max([parse_semver(parent), *(v for v, _ in bundle_versions(name_dir))])
    return f"{major}.{minor + 1}.0"


def write_version(
    parent: str | Path,
    result: Recalibration,
    feedback: str | Path,
    *,
    holdout: float,
    seed: int,
    forced: bool,
    out: str | Path | None = None,
) -> Path:
    """Write ``result`` as a new version of the bundle directory ``parent`` into ``out`` (default: the parent's name
    directory) and return its path (module docstring). DataError when the parent does not verify."""
    parent = Path(parent)
    manifest = verify_bundle_dir(parent)
    name = check_name(manifest["name"], str(parent / MANIFEST))
    name_dir = Path(out) if out is not None else parent.parent
    name_dir.mkdir(parents=True, exist_ok=True)
    version = next_version(name_dir, manifest["version"])
    target = name_dir / version
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.recalibrate.", dir=name_dir))
    try:
        new = _build(parent, manifest, result, staging, version)
        new["recalibration"] = {
            "parent": manifest["version"],
            "feedback_sha256": file_digest(Path(feedback)),
            "feedback_rows": result.fit_rows + result.holdout_rows,
            "fit_rows": result.fit_rows,
            "holdout_rows": result.holdout_rows,
            "holdout": float(holdout),
            "seed": int(seed),
            "forced": bool(forced),
            "metrics": result.metrics,
        }
        names = [p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file()]
        seal(new, file_table(staging, names))
        atomic_write_text(staging / CARD, model_card(new))
        new["files"] = file_table(staging, [*names, CARD])
        atomic_write_text(staging / MANIFEST, json.dumps(new, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        verify_bundle_dir(staging)  # what every loader will check, before the version appears
        os.rename(staging, target)  # refuses an existing non-empty target: a version is never overwritten
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _build(
    parent: Path, manifest: dict[str, Any], result: Recalibration, staging: Path, version: str
) -> dict[str, Any]:
    """Fill ``staging`` with the parent's files (the calibrators and decision graph rewritten, no model card) and
    return the new manifest without its seal."""
    files = BundleFiles(parent, manifest)
    decision = manifest["decision"]
    paths = decision["files"]
    if tuple(result.calibrators.features) != tuple(decision["features"]):
        raise DataError("the refitted calibrators' features differ from the bundle's decision features", str(parent))
    for name in manifest["files"]:
        if name not in (CARD, paths["calibrators"], paths["classifier_onnx"]):
            atomic_write_bytes(staging / name, files.read(name, f"files.{name}"))
    save_learned(result.calibrators, staging / paths["calibrators"])
    classifier = files.learned(paths["classifier"], "decision.files.classifier", CLASSIFIER_KINDS)
    with tempfile.TemporaryDirectory(prefix=".classifier.", dir=staging.parent) as scratch:
        graph = export_onnx(classifier, Path(scratch) / "classifier.onnx", list(decision["features"]))
        export_decision_onnx(result.calibrators, graph, staging / paths["classifier_onnx"], decision["tau"])
    new = copy.deepcopy(manifest)
    new.update(
        {
            "schema_version": SCHEMA_VERSION,
            "version": version,
            "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "workbench": {**(manifest.get("workbench") or {}), "version": __version__},
        }
    )
    new["notes"] = [
        *manifest.get("notes", []),
        f"recalibrated from {manifest['version']} on labelled feedback (workbench recalibrate): the calibrators and "
        "the decision graph are refitted; the classifier, tau, the held-out metrics and the monitoring reference are "
        f"{manifest['version']}'s",
    ]
    return new
