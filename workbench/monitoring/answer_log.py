"""The answer log: one JSON object per line per served answer (``workbench serve --answer-log``), what
``workbench monitor`` reads. No question and no answer text: only what drift monitoring needs.

A record (``LOG_VERSION`` 1)::

    {"log": 1, "time": 1767225600.25, "bundle": "tiny", "version": "1.0.0", "method": "d2rag",
     "p_correct": 0.71, "tau": 0.5, "features": {"confidence": 0.83, "entropy": -1.2}, "retrieved": false,
     "ood": false, "latency_s": 0.41}

``time`` (Unix seconds) is required; ``p_correct``, ``tau`` and ``features`` are null for a method that does not
decide with the bundle's policy, ``ood`` null when the bundle has no OOD flag; a feature the runtime could not
compute is null. Other fields are ignored (a log another producer wrote may carry more). :func:`record_values` turns
a record into the monitored series' values: each feature, ``p_correct``, ``retrieval`` (P < τ: the decision, not
whether retrieval happened) and ``ood``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from workbench.core.errors import DataError
from workbench.core.strict_json import loads_strict
from workbench.monitoring.reference import feature_series

LOG_VERSION = 1

MAX_LINE_BYTES = 1 << 20
"""A longer line is refused (a log record is a few hundred bytes)."""


def log_record(answer: Any, bundle: str, version: str, when: float) -> dict[str, Any]:
    """The log record of one :class:`~workbench.runtime.runtime.RuntimeAnswer` answered at ``when``."""
    ood = getattr(answer, "ood", None)
    ood = ood if isinstance(ood, dict) else None
    features = getattr(answer, "features", None)
    features = features if isinstance(features, dict) else None
    return {  # getattr: a runtime's answer need only have to_dict() and ood (ServableRuntime); the rest is optional
        "log": LOG_VERSION,
        "time": round(float(when), 3),
        "bundle": bundle,
        "version": version,
        "method": str(getattr(answer, "method", "")),
        "p_correct": _finite(getattr(answer, "p_correct", None)),
        "tau": _finite(getattr(answer, "tau", None)),
        "features": {str(k): _finite(v) for k, v in features.items()} if features is not None else None,
        "retrieved": bool(getattr(answer, "retrieved", False)),
        "ood": bool(ood.get("flag")) if ood is not None else None,
        "latency_s": _finite(getattr(answer, "latency_s", None)),
    }


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def record_values(record: dict[str, Any]) -> dict[str, float]:
    """The monitored series' values of one (valid) record; a series the record does not inform is absent, a null
    feature of a deciding answer is NaN (counted as missing)."""
    out: dict[str, float] = {}
    p, tau = record.get("p_correct"), record.get("tau")
    if p is not None:
        out["p_correct"] = float(p)
        for name, value in (record.get("features") or {}).items():
            out[feature_series(name)] = math.nan if value is None else float(value)
        if tau is not None:
            out["retrieval"] = float(p < tau)
    if record.get("ood") is not None:
        out["ood"] = float(bool(record["ood"]))
    return out


def _number(value: Any, nullable: bool) -> bool:
    if value is None:
        return nullable
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_record(record: Any, features: Iterable[str], where: str, row: int) -> dict[str, Any]:
    """``record`` if it is a valid log record whose deciding answers carry every one of ``features`` (the bundle's
    decision features); DataError naming the row and the field otherwise."""
    at = f"{where}: row {row}"
    if not isinstance(record, dict):
        raise DataError("a log record must be a JSON object", at)
    if not _number(record.get("time"), nullable=False):
        raise DataError("'time' must be a number (Unix seconds)", at)
    for key in ("p_correct", "tau"):
        if not _number(record.get(key), nullable=True):
            raise DataError(f"'{key}' must be a number or null", at)
    p = record.get("p_correct")
    if p is not None and not 0.0 <= p <= 1.0:
        raise DataError("'p_correct' must be in [0, 1]", at)
    if record.get("ood") is not None and not isinstance(record["ood"], bool):
        raise DataError("'ood' must be true, false or null", at)
    given = record.get("features")
    if given is not None and not isinstance(given, dict):
        raise DataError("'features' must be an object of feature: number or null", at)
    if p is not None:
        given = given or {}
        for name in features:
            if name not in given:
                raise DataError(f"'features.{name}' is missing (a decision feature of the bundle)", at)
            if not _number(given[name], nullable=True):
                raise DataError(f"'features.{name}' must be a number or null", at)
    return record


def read_log(path: str | Path, features: Iterable[str]) -> list[dict[str, Any]]:
    """The records of the answer log at ``path`` in file order, each checked (:func:`check_record`; blank lines
    skipped); DataError naming the file, row and field of the first bad one, or an empty log."""

    path = Path(path)
    names = list(features)
    records = []
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below; an OSError names the file
    except OSError as exc:
        raise DataError(f"cannot read the answer log ({type(exc).__name__})", str(path)) from None
    with handle:
        for row, line in enumerate(handle, start=1):
            if len(line) > MAX_LINE_BYTES:
                raise DataError(f"line over {MAX_LINE_BYTES} bytes", f"{path}: row {row}")
            if not line.strip():
                continue
            record = loads_strict(line, f"{path}: row {row}")
            records.append(check_record(record, names, str(path), row))
    if not records:
        raise DataError("the answer log has no records", str(path))
    return records
