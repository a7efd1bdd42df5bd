"""Bundles and references for the monitoring tests: a synthetic reference, and the committed tiny bundle with that
reference added and its manifest sealed again (what an export of schema 1.6 writes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from tests.unit.bundle.test_bundle_attacks import _reseal
from workbench.monitoring.reference import REFERENCE_FILE, DriftReference, build_reference
from workbench.monitoring.settings import DriftSettings

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "bundles" / "tiny" / "1.0.0"
SETTINGS = DriftSettings(window=50, min_count=20)


def synthetic_reference(features: tuple[str, ...] = ("entropy", "length")) -> DriftReference:
    """A reference of 400 rows where questions are 20-40 characters long (the fake runtime's ``length`` feature),
    P(correct) is uniform on [0.5, 0.95] and 5% are flagged out of distribution."""
    rng = np.random.default_rng(0)
    n = 400
    values = {"entropy": -rng.exponential(size=n), "length": rng.integers(20, 41, size=n).astype(float)}
    values.update({name: rng.normal(size=n) for name in features if name not in values})
    p = rng.uniform(0.5, 0.95, size=n)
    return build_reference(
        "calib", {f: values[f] for f in features}, p, (p < 0.4).astype(float), (rng.random(n) < 0.05), SETTINGS
    )


def bundle_with_reference(target: Path, features: tuple[str, ...], edit=None) -> Path:
    """A copy of the committed tiny bundle at ``target`` carrying :func:`synthetic_reference` (its decision features
    set to ``features``), its manifest changed by ``edit`` (if given) and sealed again, so it verifies as any bundle
    does."""
    root = Path(shutil.copytree(FIXTURE, target))
    (root / "monitoring").mkdir()
    (root / REFERENCE_FILE).write_text(json.dumps(synthetic_reference(features).to_dict()))
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["decision"]["features"] = list(features)
    manifest["monitoring"] = {"file": REFERENCE_FILE, "split": "calib", "rows": 400}
    manifest["files"][REFERENCE_FILE] = {}
    if edit is not None:
        edit(manifest)
    _reseal(root, manifest)
    return root
