"""``workbench monitor``: the drift of an answer log against a bundle's reference, window by window, offline.

The log's records (:mod:`workbench.monitoring.answer_log`), in file order, are cut into consecutive windows of the
bundle's ``settings.window`` answers (the last may be shorter); each window's drift is what ``serve``'s ``/drift``
computes over a rolling window of the same size (:func:`workbench.monitoring.drift.window_drift`). The report
(``drift.json``) lists every window and, per series, its largest PSI, how many windows alarmed and the first that
did; ``drift.png`` plots PSI per series over the windows (when matplotlib, a ``train``-extra dependency, is
installed; else the report notes its absence).
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from workbench.bundle.files import BundleFiles
from workbench.core.atomic import atomic_write_json
from workbench.core.errors import DataError
from workbench.monitoring.answer_log import read_log, record_values
from workbench.monitoring.drift import window_drift
from workbench.monitoring.reference import DriftReference, read_reference
from workbench.monitoring.window import NO_REFERENCE
from workbench.plots import drift_over_time
from workbench.runtime.opening import open_bundle

REPORT = "drift.json"
PLOT = "drift.png"
NO_PLOT = "not drawn: matplotlib (the train extra) is not installed, or no window had enough answers"


def drift_report(reference: DriftReference, records: list[dict[str, Any]], window: int | None = None) -> dict[str, Any]:
    """The report of ``records`` against ``reference`` in windows of ``window`` answers (the reference's
    ``settings.window`` by default); see the module docstring."""
    size = window or reference.settings.window
    windows = []
    for index, start in enumerate(range(0, len(records), size)):
        chunk = records[start : start + size]
        values: dict[str, list[float]] = {}
        for record in chunk:
            for name, value in record_values(record).items():
                values.setdefault(name, []).append(value)
        drift = window_drift(reference, values)
        windows.append(
            {
                "index": index,
                "first_row": start + 1,
                "answers": len(chunk),
                "start": chunk[0]["time"],
                "end": chunk[-1]["time"],
                "alarm": any(d.alarm for d in drift.values()),
                "series": {name: d.to_dict() for name, d in drift.items()},
            }
        )
    summary = {}
    for name in reference.series:
        rows = [w["series"][name] for w in windows]
        alarmed = [w["index"] for w, row in zip(windows, rows, strict=True) if row["alarm"]]
        psis = [row["psi"] for row in rows if row["psi"] is not None and row["status"] != "too_few"]
        summary[name] = {
            "max_psi": max(psis) if psis else None,
            "alarm_windows": len(alarmed),
            "first_alarm_window": alarmed[0] if alarmed else None,
        }
    return {
        "records": len(records),
        "window": size,
        "reference_split": reference.split,
        "reference_rows": reference.rows,
        "settings": asdict(reference.settings),
        "alarm": any(w["alarm"] for w in windows),
        "summary": summary,
        "windows": windows,
    }


def plot_report(report: dict[str, Any], path: Path, title: str) -> Path | None:
    """``drift.png``: PSI per series over the report's windows (None, nothing written, without matplotlib)."""
    if importlib.util.find_spec("matplotlib") is None:
        return None

    psi = {
        name: [_shown(w["series"][name]) for w in report["windows"]]
        for name in report["summary"]
        if any(_shown(w["series"][name]) is not None for w in report["windows"])
    }
    if not psi:
        return None
    alarm = report["settings"]["psi_alarm"]
    return drift_over_time(path, psi, alarm, xlabel=f"window of {report['window']} answers", title=title)


def _shown(row: dict[str, Any]) -> float | None:
    value = row["psi"]
    return value if row["status"] != "too_few" and value is not None and math.isfinite(value) else None


def monitor_log(
    bundle: str | Path, log: str | Path, out: str | Path, window: int | None = None
) -> tuple[dict[str, Any], list[Path]]:
    """``workbench monitor``: the drift report of the answer log ``log`` against the reference of ``bundle`` (a
    directory or ``.tar.gz``, verified as every load is), written to ``out`` (``drift.json``, and ``drift.png``
    when matplotlib is installed). Everything is read and checked before anything is written: DataError (one line
    naming the file, row and field) for a bad log, a bundle without a reference, or a window under 1."""

    if window is not None and window < 1:
        raise DataError(f"--window must be at least 1, got {window}", "monitor")
    root, manifest, _, lease = open_bundle(bundle)
    try:
        where = str(root / "manifest.json")
        reference = read_reference(BundleFiles(root, manifest), manifest, where)
        if reference is None:
            raise DataError(NO_REFERENCE, where)
        features = list((manifest.get("decision") or {}).get("features") or [])
        records = read_log(log, features)
    finally:
        if lease is not None:
            lease.release()
    report = {
        "bundle": manifest["name"],
        "version": manifest["version"],
        "log": str(log),
        **drift_report(reference, records, window),
    }
    out = Path(out)
    title = f"Drift of {manifest['name']} {manifest['version']} against its {reference.split} split"
    plot = plot_report(report, out / PLOT, title)
    report["plot"] = PLOT if plot is not None else NO_PLOT
    written = [atomic_write_json(out / REPORT, report), *([plot] if plot is not None else [])]
    return report, written
