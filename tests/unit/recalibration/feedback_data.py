"""Synthetic feedback for the tiny fixture bundle whose labels follow a shifted relation to its features: answers
are correct far less often than the bundle's calibrators say, so a refit is measurably better on held-out rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from workbench.bundle.files import BundleFiles
from workbench.bundle.integrity import verify_bundle_dir
from workbench.calibration.calibrator_set import CalibratorSet

TINY = Path(__file__).resolve().parents[2] / "fixtures" / "bundles" / "tiny" / "1.0.0"


def tiny_calibrators() -> CalibratorSet:
    """The fixture bundle's calibrator set, read as the runtime reads it."""
    manifest = verify_bundle_dir(TINY)
    return BundleFiles(TINY, manifest).learned(
        manifest["decision"]["files"]["calibrators"], "decision.files.calibrators", {"calibrator_set"}
    )


def shifted_rows(n: int, seed: int = 0) -> list[dict]:
    """``n`` feedback rows: each feature drawn across the fitted range of its calibrator, and the label correct with
    probability half of the bundle's first feature's P(correct) (a drifted, over-confident relation)."""
    calibrators = tiny_calibrators()
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        values = {}
        for name in calibrators.features:
            knots = calibrators.calibrators[name].to_dict()["x"]  # the isotonic fit's breakpoints
            values[name] = float(rng.uniform(min(knots), max(knots)))
        first = calibrators.features[0]
        p = 0.5 * float(calibrators.calibrators[first].predict([values[first]])[0]) + 0.05
        label = int(rng.random() < p)
        rows.append(
            {"id": f"q{i}", "question": f"question {i}?", "answer": f"answer {i}", "label": label, "features": values}
        )
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    """``rows`` as JSON lines at ``path``."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
