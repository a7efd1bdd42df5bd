"""Report section "Out of distribution": how often the fit split's OOD profile flags each other split, and what the
calibrated features are worth on all its questions against the unflagged ones.

Reads the ``calibrate`` stage's outputs: ``ood.json`` (the profile), ``ood_checks.json`` (each row's failed checks,
in ``calibrated.json``'s row order) and ``calibrated.json`` (labels and calibrated features). A calibrate output made
before the profile existed gives no section.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from workbench.core.formatting import fmt


def _metric(name: str, values: np.ndarray, labels: np.ndarray) -> float | None:
    """AUROC or ECE (10 equal-width bins) of ``values`` against ``labels``; None where undefined."""
    from workbench.metrics.calibration import ece
    from workbench.metrics.ranking import auroc

    if values.size == 0:
        return None
    value = auroc(values, labels) if name == "auroc" else ece(values, labels)
    return None if math.isnan(value) else float(value)


def ood_split_summary(checks: list[list[str]], labels: np.ndarray, calibrated: dict[str, Any]) -> dict[str, Any]:
    """One split's flag rate, counts per check, and per feature AUROC / ECE on all rows and on the unflagged rows."""
    flagged = np.asarray([bool(c) for c in checks], dtype=bool)
    counts: dict[str, int] = {}
    for row in checks:
        for name in row:
            counts[name] = counts.get(name, 0) + 1
    keep = ~flagged
    features = {}
    for name, column in calibrated.items():
        values = np.asarray(column, dtype=float)
        features[name] = {
            f"{metric}_{part}": _metric(metric, values[mask], labels[mask])
            for metric in ("auroc", "ece")
            for part, mask in (("all", np.ones_like(keep)), ("unflagged", keep))
        }
    return {
        "rows": len(checks),
        "flagged": int(flagged.sum()),
        "flag_rate": float(flagged.mean()) if checks else None,
        "checks": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
        "features": features,
    }


def ood_section(calibrate_dir: Path | None) -> list[str]:
    """Markdown for the "Out of distribution" section ([] without the calibrate stage's OOD outputs)."""
    if calibrate_dir is None or not (calibrate_dir / "ood_checks.json").is_file():
        return []
    meta = json.loads((calibrate_dir / "summary.json").read_text())
    checks = json.loads((calibrate_dir / "ood_checks.json").read_text())
    data = json.loads((calibrate_dir / "calibrated.json").read_text())
    fit = meta["fit_split"]
    lines = [
        "## Out of distribution",
        "",
        f"The OOD profile fitted on `{fit}` (docs/ood.md): {meta.get('ood', 'see ood.json')}. A question is flagged "
        "when a raw feature lies outside the fit split's 0.5–99.5 % range (plus a margin), its form (lead word, "
        "named options) or length is rare there, or its greedy answer is longer than the fit split's. Below: the flag "
        "rate of each split and, per calibrated feature, AUROC and ECE on all its questions → on the unflagged ones.",
        "",
    ]
    for split in checks:
        if split not in data:
            continue
        labels = np.asarray(data[split]["label"], dtype=float)
        summary = ood_split_summary(checks[split]["checks"], labels, data[split]["calibrated"])
        rate = summary["flag_rate"]
        which = ", ".join(f"`{name}` {count}" for name, count in summary["checks"].items()) or "none"
        role = " (the fit split itself: in-sample)" if split == fit else ""
        lines += [
            f"**{split}**{role}: {summary['flagged']} of {summary['rows']} questions flagged "
            f"({fmt(None if rate is None else 100 * rate, 1)} %); failed checks: {which}.",
            "",
        ]
        if split == fit:
            continue
        lines += [
            "| feature | AUROC all → unflagged | ECE all → unflagged |",
            "|---|---|---|",
            *[
                f"| {name} | {fmt(m['auroc_all'])} → {fmt(m['auroc_unflagged'])} "
                f"| {fmt(m['ece_all'])} → {fmt(m['ece_unflagged'])} |"
                for name, m in summary["features"].items()
            ],
            "",
        ]
    return lines
