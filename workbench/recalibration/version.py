"""Write a recalibration as a new version of its bundle: ``<name dir>/<X.(Y+1).0>/`` beside the parent, and its
archive ``<name dir>/<name>-<X.(Y+1).0>.tar.gz`` as export writes one.

The new version is the parent with these files rewritten and its manifest re-sealed:

* ``decision.files.calibrators``: the refitted :class:`~workbench.calibration.calibrator_set.CalibratorSet`;
* ``decision.files.classifier``: the refitted router, when ``--refit router`` refitted it;
* ``decision.files.classifier_onnx``: the decision graph rebuilt around them (the numpy classifier — the refitted one
  or the parent's — exported by :func:`~workbench.classify.onnx_export.export_onnx`, then
  :func:`~workbench.classify.onnx_decision.export_decision_onnx` with the new τ or the parent's, as export builds
  it), so the runtime's numpy / ONNX agreement check holds;
* ``monitoring/reference.json``: rebuilt from the feedback's fit part under the new decision
  (:mod:`workbench.recalibration.reference`), named by a ``monitoring`` block whose ``split`` is ``feedback``;
* ``README.md``: the model card of the new manifest.

Every other file is copied from the parent's verified bytes (:class:`~workbench.bundle.files.BundleFiles`). The
manifest keeps the parent's content, takes this workbench's schema version, the new ``version`` and ``created``, the
new ``decision.tau`` / ``rule`` / ``always_retrieve`` when τ was re-chosen, ``provenance.fitted`` records of the
refitted parts (set by ``recalibrate`` on the ``feedback`` rows of the fit part), and gains a ``recalibration`` block
(schema 1.7: parent version, feedback sha256, row counts, split, what was ``refitted``, before / after metrics) and a
note saying what was refitted and what stays the parent's (the held-out ``metrics`` always do). The version is the
next minor above the highest version of the name directory (1.0.0 → 1.1.0).

Atomic: the version is built and verified (:func:`~workbench.bundle.integrity.verify_bundle_dir`) in a temporary
directory beside it, its archive written (atomically) from that directory, and the directory renamed into place; on
any failure neither is left.
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
from workbench.bundle.archive import write_archive
from workbench.bundle.card import model_card
from workbench.bundle.files import BundleFiles
from workbench.bundle.integrity import file_digest, file_table, verify_bundle_dir
from workbench.bundle.manifest import seal
from workbench.bundle.provenance import Questions
from workbench.bundle.schema import MANIFEST, SCHEMA_VERSION, bundle_versions, check_name, parse_semver
from workbench.calibration.calibrator_set import CalibratorSet
from workbench.classify.onnx_decision import export_decision_onnx
from workbench.classify.onnx_export import export_onnx
from workbench.core.atomic import atomic_write_bytes, atomic_write_text
from workbench.core.errors import DataError
from workbench.methods.learned import save_learned
from workbench.monitoring.reference import REFERENCE_FILE, read_reference
from workbench.recalibration.compare import Recalibration
from workbench.recalibration.decision import ParentDecision, describe_refit, parent_decision
from workbench.recalibration.reference import SPLIT, feedback_reference

CARD = "README.md"
PROVENANCE_KEYS = {"calibrators": "decision.calibrators", "router": "decision.classifier", "tau": "decision.tau"}
"""The ``provenance.fitted`` record of each refitted part."""


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


def bundle_decision(root: str | Path) -> tuple[dict[str, Any], CalibratorSet, ParentDecision]:
    """:func:`bundle_calibrators` and the bundle's :class:`~workbench.recalibration.decision.ParentDecision` (its
    classifier, τ and the settings that chose them)."""
    manifest, calibrators = bundle_calibrators(root)
    return manifest, calibrators, parent_decision(manifest, BundleFiles(Path(root), manifest))


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
    archive: bool = True,
    embed: Any = None,
) -> Path:
    """Write ``result`` as a new version of the bundle directory ``parent`` into ``out`` (default: the parent's name
    directory), and its archive beside it unless not ``archive``; return the version's path (module docstring).
    ``embed`` is the bundle's embedder's ``encode``, for the reference's OOD flag (see
    :mod:`workbench.recalibration.reference`). DataError when the parent does not verify or the archive exists."""
    parent = Path(parent)
    manifest = verify_bundle_dir(parent)
    name = check_name(manifest["name"], str(parent / MANIFEST))
    name_dir = Path(out) if out is not None else parent.parent
    name_dir.mkdir(parents=True, exist_ok=True)
    version = next_version(name_dir, manifest["version"])
    target = name_dir / version
    packed = name_dir / f"{name}-{version}.tar.gz"
    if archive and packed.exists():
        raise DataError("an archive of this version already exists: nothing written", str(packed))
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.recalibrate.", dir=name_dir))
    written = None
    try:
        new = _build(parent, manifest, result, staging, version, embed)
        new["recalibration"] = {
            "parent": manifest["version"],
            "feedback_sha256": file_digest(Path(feedback)),
            "feedback_rows": result.fit_rows + result.holdout_rows,
            "fit_rows": result.fit_rows,
            "holdout_rows": result.holdout_rows,
            "holdout": float(holdout),
            "seed": int(seed),
            "forced": bool(forced),
            "refitted": list(result.refitted),
            "metrics": result.metrics,
        }
        names = [p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file()]
        seal(new, file_table(staging, names))
        atomic_write_text(staging / CARD, model_card(new))
        new["files"] = file_table(staging, [*names, CARD])
        atomic_write_text(staging / MANIFEST, json.dumps(new, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        verify_bundle_dir(staging)  # what every loader will check, before the version appears
        if archive:  # from the verified files, under the folder name export gives its archives
            written = write_archive(staging, packed, f"{name}-{version}")
        os.rename(staging, target)  # refuses an existing non-empty target: a version is never overwritten
        written = None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if written is not None:  # the directory did not appear: neither does its archive
            written.unlink(missing_ok=True)
    return target


def _build(
    parent: Path, manifest: dict[str, Any], result: Recalibration, staging: Path, version: str, embed: Any
) -> dict[str, Any]:
    """Fill ``staging`` with the parent's files (the calibrators, the classifier when refitted, the decision graph
    and the monitoring reference rewritten, no model card) and return the new manifest without its seal."""
    files = BundleFiles(parent, manifest)
    decision = manifest["decision"]
    paths = decision["files"]
    if tuple(result.calibrators.features) != tuple(decision["features"]):
        raise DataError("the refitted calibrators' features differ from the bundle's decision features", str(parent))
    parent_policy = parent_decision(manifest, files)
    policy = parent_policy.policy(result.calibrators, result.classifier, result.tau)
    rewritten = {CARD, paths["calibrators"], paths["classifier_onnx"], REFERENCE_FILE}
    if result.classifier is not None:
        rewritten.add(paths["classifier"])
    if result.fit_features is None:  # nothing to describe: the parent's reference is kept
        rewritten.discard(REFERENCE_FILE)
    elif isinstance(manifest.get("monitoring"), dict):
        rewritten.add(files.name(manifest["monitoring"]["file"], "monitoring.file"))
    for name in manifest["files"]:
        if name not in rewritten:
            atomic_write_bytes(staging / name, files.read(name, f"files.{name}"))
    save_learned(result.calibrators, staging / paths["calibrators"])
    if result.classifier is not None:
        save_learned(result.classifier, staging / paths["classifier"])
    with tempfile.TemporaryDirectory(prefix=".classifier.", dir=staging.parent) as scratch:
        graph = export_onnx(policy.classifier, Path(scratch) / "classifier.onnx", list(decision["features"]))
        export_decision_onnx(result.calibrators, graph, staging / paths["classifier_onnx"], policy.tau)
    new = copy.deepcopy(manifest)
    new.update(
        {
            "schema_version": SCHEMA_VERSION,
            "version": version,
            "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "workbench": {**(manifest.get("workbench") or {}), "version": __version__},
        }
    )
    if result.tau is not None:
        new["decision"].update(tau=policy.tau, rule=result.rule or policy.rule, always_retrieve=policy.tau > 1.0)
    if result.fit_ids:  # provenance: what was fitted on which feedback rows (the card and `workbench bundles` say it)
        provenance = new["provenance"] = dict(new.get("provenance") or {})
        fitted = provenance["fitted"] = dict(provenance.get("fitted") or {})
        for part in result.refitted:  # τ is chosen on out-of-fold P(correct) of those rows
            rows = Questions("recalibrate", SPLIT, frozenset(result.fit_ids), out_of_fold=part == "tau")
            fitted[PROVENANCE_KEYS[part]] = rows.record("set_by")
    notes = [describe_refit(result.refitted, manifest["version"])]
    if result.fit_features is not None:
        ood = files.learned(paths["ood"], "decision.files.ood", {"ood_profile"}) if paths.get("ood") else None
        reference, kept = feedback_reference(
            policy,
            result.fit_features,
            result.fit_questions,
            read_reference(files, manifest, str(parent)),
            ood,
            embed,
        )
        path = staging / REFERENCE_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(reference.to_dict(), indent=1, sort_keys=True) + "\n")
        new["monitoring"] = {"file": REFERENCE_FILE, "split": SPLIT, "rows": reference.rows}
        if kept:
            notes.append(
                f"the monitoring reference's ood series is {manifest['version']}'s: its OOD flag's embedding check "
                "needs the embedder it was fitted with, which recalibrate was not given"
            )
    new["notes"] = [*manifest.get("notes", []), *notes]
    return new
