"""Open a bundle (a directory or a ``.tar.gz``), verify it, and read its learned parts — nothing else runs.

:func:`open_bundle` unpacks an archive safely (into the cache, keyed by the archive's sha256, reused when already
unpacked and still intact) and verifies the directory (:func:`~workbench.bundle.integrity.verify_bundle_dir`: every
file's size and sha256 before anything is parsed). :func:`read_learned_parts` then parses the learned files through
the learned-artifact protocol into the same :class:`~workbench.methods.learned.LearnedParts` the evaluation stage
builds from a run, so both answer with one implementation.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from workbench.bundle.integrity import verify_bundle_dir
from workbench.bundle.schema import check_schema
from workbench.core.errors import DataError


def _archive_digest(path: Path, max_bytes: int) -> str:
    from workbench.bundle.archive import check_archive_size

    check_archive_size(path, max_bytes)  # before reading a byte of it
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def latest_version(name_dir: Path) -> Path:
    """The highest ``X.Y.Z`` version directory under a bundle's name directory (``artifacts/bundles/NAME``)."""
    from workbench.bundle.schema import bundle_versions

    versions = bundle_versions(name_dir)
    if not versions:
        raise DataError("no manifest.json and no X.Y.Z version directories: not a bundle", str(name_dir))
    return versions[-1][1]


def open_bundle(path: str | Path, *, max_bytes: int, extract_dir: str | Path | None = None) -> tuple[Path, dict, list]:
    """``(bundle directory, manifest, notes)`` of a verified bundle; DataError (one line, naming the file) otherwise.

    ``path`` is a version directory, a bundle's name directory (its highest version is taken) or a ``.tar.gz``."""
    path = Path(path)
    if path.is_dir() and not (path / "manifest.json").exists():
        path = latest_version(path)
    if path.is_dir():
        root = path
    elif path.is_file() and path.name.endswith((".tar.gz", ".tgz")):
        from workbench.bundle.archive import extract_archive
        from workbench.core.paths import cache_dir

        digest = _archive_digest(path, max_bytes)
        base = Path(extract_dir) if extract_dir is not None else cache_dir("bundles")
        root = base / digest[:32]
        if root.is_dir():
            try:
                manifest = verify_bundle_dir(root)
                return root, manifest, check_schema(manifest, str(root))
            except DataError:  # an unpacked copy that was altered since: unpack again
                pass
        extract_archive(path, root, max_bytes=max_bytes)
    elif not path.exists():
        raise DataError("no such bundle (a bundle directory or a .tar.gz archive)", str(path))
    else:
        raise DataError("not a bundle: expected a directory or a .tar.gz archive", str(path))
    manifest = verify_bundle_dir(root)
    return root, manifest, check_schema(manifest, str(root))


def read_learned_parts(root: Path, manifest: dict[str, Any], classifier: str = "numpy") -> Any:
    """D²-RAG's :class:`~workbench.methods.learned.LearnedParts` from a verified bundle (None without a decision).

    ``classifier`` picks the numpy weights (``learned/classifier.json``) or the ONNX graph (ONNX Runtime)."""
    from workbench.classify.policy import check_tau
    from workbench.methods.learned import CLASSIFIER_KINDS, UTILITY_KINDS, LearnedParts, load_learned
    from workbench.uncertainty.calculators import StatSettings

    decision = manifest.get("decision")
    if not decision:
        return None
    where = str(root / "manifest.json")
    files = decision.get("files", {})
    calibrators = load_learned(root / files["calibrators"], expect={"calibrator_set"})
    if list(calibrators.features) != list(decision["features"]):
        raise DataError("the calibrators' features differ from the manifest's decision features", where)
    if classifier == "onnx":
        from workbench.classify.onnx_export import OnnxClassifier

        model = OnnxClassifier(root / files["classifier_onnx"])
    else:
        model = load_learned(root / files["classifier"], expect=CLASSIFIER_KINDS)
    lars = load_learned(root / files["lars"], expect={"lars"}) if "lars" in files else None
    utility_block = manifest.get("utility") or {}
    utility = None
    if utility_block.get("kind") == "learned":
        utility = load_learned(root / utility_block["file"], expect=UTILITY_KINDS)
    stats = manifest.get("stats") or {}
    settings = StatSettings.from_dict(stats["settings"], f"{where}: stats.settings") if stats.get("settings") else None
    tau = check_tau(decision["tau"], f"{where}: decision.tau")
    rule = str(decision.get("rule", ""))
    return LearnedParts.assemble(
        calibrators, model, tau, utility=utility, lars_scorer=lars, stats=settings, tau_rule=rule
    )
