"""Report section "Out of distribution": the OOD flag's false-positive rate on held-out in-distribution questions and
its detection rate on the held-out topics, with Wilson intervals, and what the calibrated features are worth on all
of a split's collected questions against the unflagged ones.

Reads the ``calibrate`` stage's outputs: ``ood.json`` (the profile), ``ood_rates.json`` (the flag rate of each
measured split, :func:`workbench.stages.calibrate.run.write_ood`), ``ood_checks.json`` (each collected row's failed
checks, in ``calibrated.json``'s row order) and ``calibrated.json`` (labels and calibrated features). A calibrate
output made before the calibrated flag (no ``ood_rates.json``) gives no section.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from workbench.calibration.ood import CHECKS
from workbench.calibration.ood_rates import describe_rate
from workbench.core.formatting import fmt
from workbench.metrics.calibration import ece
from workbench.metrics.ranking import auroc

ROLES = {
    "threshold": "the threshold split (in-sample: set to the target here)",
    "in_distribution": "false-positive rate (held out, in distribution)",
    "shift": "detection rate (held-out topics)",
}
"""What a measured split's flag rate means, by its role in ``ood_rates.json``."""


def _metric(name: str, values: np.ndarray, labels: np.ndarray) -> float | None:
    """AUROC or ECE (10 equal-width bins) of ``values`` against ``labels``; None where undefined."""

    if values.size == 0:
        return None
    value = auroc(values, labels) if name == "auroc" else ece(values, labels)
    return None if math.isnan(value) else float(value)


def feature_metrics(checks: list[list[str]], labels: np.ndarray, calibrated: dict[str, Any]) -> dict[str, Any]:
    """Per calibrated feature, AUROC and ECE on all of a split's rows and on its unflagged rows."""
    keep = ~np.asarray([bool(c) for c in checks], dtype=bool)
    every = np.ones_like(keep)
    return {
        name: {
            f"{metric}_{part}": _metric(metric, np.asarray(column, dtype=float)[mask], labels[mask])
            for metric in ("auroc", "ece")
            for part, mask in (("all", every), ("unflagged", keep))
        }
        for name, column in calibrated.items()
    }


def verdict(summary: dict[str, Any], target: float) -> str:
    """Whether a shift's detection rate beats chance — the flag's target rate on in-distribution questions — by its
    interval: above it (the interval's low end over the target), not (its high end at or under it), or unresolved."""
    low, high = summary["interval"]
    if low > target:
        return "detected beyond chance"
    if high <= target:
        return "**not detected beyond chance**"
    return "not resolved from chance on these questions"


def _in_order(rates: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The measured splits in report order: the threshold split, the in-distribution ones, the shifts."""
    order = list(ROLES)
    return sorted(rates.items(), key=lambda kv: (order.index(kv[1]["role"]), kv[0]))


def rates_table(rates: dict[str, Any], target: float) -> list[str]:
    """Markdown rows: each measured split's role, flagged count, rate with its interval and each check's count."""

    level = next(iter(rates.values()))["level"] if rates else 0.9
    lines = [
        f"| split | what its rate is | flagged | rate [{round(100 * level)} % Wilson] | "
        + " | ".join(f"`{c}`" for c in CHECKS)
        + " |",
        "|---|---|---:|---:|" + "---:|" * len(CHECKS),
    ]
    for split, summary in _in_order(rates):
        if not summary["questions"]:
            continue
        low, high = (100 * v for v in summary["interval"])
        role = ROLES.get(summary["role"], summary["role"])
        if summary["role"] == "shift":
            role += f": {verdict(summary, target)}"
        counts = " | ".join(str(summary["checks"].get(c, 0)) for c in CHECKS)
        lines.append(
            f"| {split} | {role} | {summary['flagged']} of {summary['questions']} | {100 * summary['rate']:.1f} % "
            f"[{low:.1f}, {high:.1f}] | {counts} |"
        )
    return lines


def features_lines(rates: dict[str, Any], target: float) -> list[str]:
    """The detector on the uncertainty features (measured only, not in the flag): its rate on each collected split,
    with the verdict on a shift ([] when no split has it)."""
    measured = {split: summary["features"] for split, summary in _in_order(rates) if summary.get("features")}
    if not measured:
        return []
    parts = []
    for split, summary in measured.items():
        text = f"`{split}` {describe_rate(summary)}"
        if rates[split]["role"] == "shift":
            text += f": {verdict(summary, target)}"
        parts.append(text)
    return [
        "For comparison, the same detector on the collected uncertainty features instead of the question's "
        "embedding (k-NN in the robust-standardised feature space, its threshold cross-fitted on the fit split's "
        f"collected rows for the same {100 * target:g} %; measured only — the flag does not use the features) "
        f"flags {'; '.join(parts)}.",
        "",
    ]


def ood_section(calibrate_dir: Path | None) -> list[str]:
    """Markdown for the "Out of distribution" section ([] without the calibrate stage's OOD measurements)."""
    if calibrate_dir is None or not (calibrate_dir / "ood_rates.json").is_file():
        return []
    meta = json.loads((calibrate_dir / "summary.json").read_text())
    profile = json.loads((calibrate_dir / "ood.json").read_text())
    rates = json.loads((calibrate_dir / "ood_rates.json").read_text())
    checks = json.loads((calibrate_dir / "ood_checks.json").read_text())
    data = json.loads((calibrate_dir / "calibrated.json").read_text())
    fit, calibration = meta["fit_split"], profile["calibration"]
    target = float(calibration["target_fpr"])
    where = f"`{calibration['split']}`" if calibration["split"] else f"`{fit}` cross-fitted (each against the others)"
    lines = [
        "## Out of distribution",
        "",
        f"The OOD flag (docs/ood.md), fitted on `{fit}`: {meta.get('ood', 'see ood.json')}. A question is flagged "
        "when its embedding is farther from its nearest fit-split questions than the threshold allows "
        "(`question_embedding`), or its form (lead word, named options) or length is rare on the fit split. The "
        f"threshold was set for **{100 * target:g} % false positives** on {calibration['questions']} questions of "
        f"{where}, none of the splits below that measure it. Each rate is over a split's first questions "
        "(`calibrate.ood_limit`): on in-distribution questions it is the flag's false-positive rate, on a shift its "
        f"detection rate — which beats chance when it is above the {100 * target:g} % the flag fires on anyway.",
        "",
        *rates_table(rates, target),
        "",
        *features_lines(rates, target),
    ]
    measured = [s for s in checks if s != fit and s in data]
    if measured:
        lines += [
            "The calibrated features on each collected split, on all its questions → on the ones the flag passes:",
            "",
            "| split | feature | AUROC all → unflagged | ECE all → unflagged |",
            "|---|---|---|---|",
        ]
        for split in measured:
            labels = np.asarray(data[split]["label"], dtype=float)
            metrics = feature_metrics(checks[split]["checks"], labels, data[split]["calibrated"])
            lines += [
                f"| {split} | {name} | {fmt(m['auroc_all'])} → {fmt(m['auroc_unflagged'])} "
                f"| {fmt(m['ece_all'])} → {fmt(m['ece_unflagged'])} |"
                for name, m in metrics.items()
            ]
        lines.append("")
    return lines
