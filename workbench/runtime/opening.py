"""Open a bundle (a directory or a ``.tar.gz``), verify it, and read its learned parts — nothing else runs.

:func:`open_bundle` unpacks an archive safely (:mod:`workbench.bundle.extract_cache`: keyed by the archive's sha256,
reused only when the cached copy still matches the archive) and verifies the directory
(:func:`~workbench.bundle.integrity.verify_bundle_dir`: the typed manifest, its content digest, every file's size and
sha256, every file a block names listed). :func:`read_learned_parts` then parses the learned files — each read once
through :class:`~workbench.bundle.files.BundleFiles`, its bytes checked against the manifest — through the
learned-artifact protocol into the same :class:`~workbench.methods.learned.LearnedParts` the evaluation stage builds
from a run, so both answer with one implementation; the ONNX graph and the numpy weights must agree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.bundle.archive import ArchiveLimits
from workbench.bundle.extract_cache import unpacked
from workbench.bundle.files import BundleFiles
from workbench.bundle.integrity import manifest_notes, verify_bundle_dir
from workbench.bundle.schema import bundle_versions
from workbench.core.errors import DataError
from workbench.core.paths import cache_dir
from workbench.methods.learned import CLASSIFIER_KINDS, UTILITY_KINDS, LearnedParts


def latest_version(name_dir: Path) -> Path:
    """The highest ``X.Y.Z`` version directory under a bundle's name directory (``artifacts/bundles/NAME``)."""

    versions = bundle_versions(name_dir)
    if not versions:
        raise DataError("no manifest.json and no X.Y.Z version directories: not a bundle", str(name_dir))
    return versions[-1][1]


def open_bundle(
    path: str | Path, *, limits: ArchiveLimits | None = None, extract_dir: str | Path | None = None
) -> tuple[Path, dict, list, Any]:
    """``(bundle directory, manifest, notes, lease)`` of a verified bundle; DataError (one line, naming the file)
    otherwise.

    ``path`` is a version directory, a bundle's name directory (its highest version is taken) or a ``.tar.gz``
    (unpacked under ``extract_dir``, by default the workbench cache, within ``limits``). ``lease``
    (:class:`~workbench.bundle.extract_cache.ExtractLease`; None for a directory) keeps the unpacked copy from being
    pruned while it is held: whoever uses the directory holds it."""

    path = Path(path)
    limits = limits or ArchiveLimits()
    lease = None
    if path.is_dir() and not (path / "manifest.json").exists():
        path = latest_version(path)
    if path.is_dir():
        root = path
        manifest = verify_bundle_dir(root)
    elif path.is_file() and path.name.endswith((".tar.gz", ".tgz")):
        base = Path(extract_dir) if extract_dir is not None else cache_dir("bundles")
        root, manifest, lease = unpacked(path, base, limits)
    elif not path.exists():
        raise DataError("no such bundle (a bundle directory or a .tar.gz archive)", str(path))
    else:
        raise DataError("not a bundle: expected a directory or a .tar.gz archive", str(path))
    return root, manifest, manifest_notes(manifest, str(root / "manifest.json")), lease


AGREEMENT_TOLERANCE = 1e-5
"""Largest |ΔP(correct)| accepted between the numpy weights and the ONNX graph (float32 arithmetic in the graph)."""


def check_backends_agree(calibrators: Any, numpy_model: Any, onnx_model: Any, where: str) -> None:
    """Refuse a bundle whose ONNX graph and numpy weights disagree: both are run on the calibrated images of the fit
    split's medians and of the ends of its ranges, and on a fixed set of points of the calibrated cube; any |ΔP| above
    :data:`AGREEMENT_TOLERANCE` is a DataError (a graph swapped for another of the same signature). A decision graph
    (``onnx_model.input == "raw"``: the calibrators inside) is run on raw points instead — the medians, the range ends,
    fixed points across (and beyond) the ranges, NaN and ±inf — against calibrators + numpy weights."""
    import numpy as np

    features = list(calibrators.features)
    raw = [[calibrators.medians.get(f, 0.0) for f in features]]
    if calibrators.ranges:
        for end in (0, 1):
            raw.append(
                [calibrators.ranges[f][end] if f in calibrators.ranges else raw[0][j] for j, f in enumerate(features)]
            )
    grid = np.random.default_rng(0).random((16, len(features)))  # fixed: the same points on every load
    try:
        if getattr(onnx_model, "input", "calibrated") == "raw":
            points = _raw_check_points(calibrators, np.asarray(raw, dtype=float), grid)
            expected = numpy_model.predict_proba(calibrators.transform([calibrators.clean(r)[0] for r in points]))
            gap = float(np.max(np.abs(expected - onnx_model.predict_proba(points))))
        else:
            points = calibrators.transform(np.asarray(raw, dtype=float))
            points = np.vstack([points, grid, np.zeros((1, len(features))), np.ones((1, len(features)))])
            gap = float(np.max(np.abs(numpy_model.predict_proba(points) - onnx_model.predict_proba(points))))
    except (ValueError, TypeError, IndexError, FloatingPointError) as exc:  # weights of the wrong shape or type
        raise DataError(f"the decision's learned files cannot be evaluated ({type(exc).__name__})", where) from None
    if not gap <= AGREEMENT_TOLERANCE:  # the gap is not shown: it is computed from the files' bytes
        raise DataError(
            f"the ONNX classifier and the numpy classifier disagree (|ΔP(correct)| over {AGREEMENT_TOLERANCE:g} on "
            "check points): one of them is not the classifier the run fitted",
            where,
        )


def check_classifier_kind(declared: str, numpy_model: Any, onnx_model: Any, where: str) -> None:
    """Refuse a bundle whose ``decision.classifier`` is not what its files are: the numpy weights' kind, the ONNX
    graph's structure (a hidden layer, one product, a top-k or a split test) and its ``kind`` metadata must all be
    ``declared``."""
    found = {
        "decision.files.classifier": getattr(numpy_model, "kind", None),
        "decision.files.classifier_onnx": getattr(onnx_model, "classifier_kind", None),
        "the ONNX graph's kind metadata": getattr(onnx_model, "declared_kind", None) or declared,
    }
    for field, kind in found.items():
        if kind != declared:
            shown = kind if kind in CLASSIFIER_KINDS else f"none of {', '.join(sorted(CLASSIFIER_KINDS))}"
            raise DataError(f"'decision.classifier' is {declared}, but {field} is {shown}", where)


def _raw_check_points(calibrators: Any, anchors: Any, grid: Any) -> Any:
    """Raw check points for a decision graph: ``anchors`` (medians, range ends), ``grid`` (points of the unit cube)
    stretched over each feature's range widened by half its width on either side (a feature without a range: its
    median ± 1), and rows of NaN, +inf and −inf."""
    import numpy as np

    features = list(calibrators.features)
    low = np.array(
        [calibrators.ranges.get(f, (m - 1.0, m + 1.0))[0] for f, m in zip(features, anchors[0], strict=True)]
    )
    high = np.array(
        [calibrators.ranges.get(f, (m - 1.0, m + 1.0))[1] for f, m in zip(features, anchors[0], strict=True)]
    )
    spread = np.maximum(high - low, 1e-6)
    stretched = (low - spread / 2) + grid * (2 * spread)
    special = np.array([[v] * len(features) for v in (np.nan, np.inf, -np.inf)])
    return np.vstack([anchors, stretched, special])


def read_learned_parts(root: Path, manifest: dict[str, Any], classifier: str = "numpy") -> Any:
    """D²-RAG's :class:`~workbench.methods.learned.LearnedParts` from a verified bundle (None without a decision).

    Every file is read through :class:`~workbench.bundle.files.BundleFiles` (listed in the manifest, bytes checked
    against its sha256). Both classifiers are read and compared (:func:`check_backends_agree`); ``classifier`` picks
    which one answers: the numpy weights (``learned/classifier.json``) or the ONNX graph (ONNX Runtime)."""
    from workbench.classify.onnx_export import OnnxClassifier
    from workbench.classify.policy import check_tau
    from workbench.uncertainty.calculators import StatSettings
    from workbench.uncertainty.features import check_recorded_features

    decision = manifest.get("decision")
    if not decision:
        return None
    where = str(root / "manifest.json")
    check_recorded_features(manifest.get("features") or [], where)  # a plugin feature's package must be installed
    files = BundleFiles(root, manifest)
    paths = decision["files"]
    calibrators = files.learned(paths["calibrators"], "decision.files.calibrators", {"calibrator_set"})
    if list(calibrators.features) != list(decision["features"]):
        raise DataError("the calibrators' features differ from the manifest's decision features", where)
    numpy_model = files.learned(paths["classifier"], "decision.files.classifier", CLASSIFIER_KINDS)
    onnx_bytes = files.read(paths["classifier_onnx"], "decision.files.classifier_onnx")
    onnx_model = OnnxClassifier(onnx_bytes, str(root / paths["classifier_onnx"]))
    for name, model in (("classifier", numpy_model), ("classifier_onnx", onnx_model)):
        names = tuple(getattr(model, "feature_names", ()) or ())
        if names and names != tuple(decision["features"]):
            raise DataError(f"decision.files.{name} was fitted on features {list(names)}, not the decision's", where)
    check_classifier_kind(decision["classifier"], numpy_model, onnx_model, where)
    check_backends_agree(calibrators, numpy_model, onnx_model, where)
    model = onnx_model if classifier == "onnx" else numpy_model
    lars = files.learned(paths["lars"], "decision.files.lars", {"lars"}) if paths.get("lars") else None
    utility_block = manifest.get("utility") or {}
    utility = None
    if utility_block.get("kind") == "learned":
        utility = files.learned(utility_block["file"], "utility.file", UTILITY_KINDS)
    stats = manifest.get("stats") or {}
    settings = StatSettings.from_dict(stats["settings"], f"{where}: stats.settings") if stats.get("settings") else None
    tau = check_tau(decision["tau"], f"{where}: decision.tau")
    rule = str(decision.get("rule", ""))
    # the OOD profile (docs/ood.md); a bundle exported before it has none, or an uncalibrated one (version 1, which
    # the runtime notes and does not use), and answers without the flag
    ood = None
    if paths.get("ood") and not _uncalibrated_profile(files.read(paths["ood"], "decision.files.ood")):
        ood = files.learned(paths["ood"], "decision.files.ood", {"ood_profile"})
    return LearnedParts.assemble(
        calibrators, model, tau, utility=utility, lars_scorer=lars, stats=settings, tau_rule=rule, ood=ood
    )


def _uncalibrated_profile(data: bytes) -> bool:
    """Whether an OOD profile's verified bytes are a version-1 profile (never calibrated to a false-positive rate)."""
    from workbench.calibration.ood import UNCALIBRATED_VERSION

    try:
        payload = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return False  # the learned-artifact reader refuses it in one line
    return isinstance(payload, dict) and payload.get("version") == UNCALIBRATED_VERSION
