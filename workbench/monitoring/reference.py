"""The reference distributions a bundle carries (``monitoring/reference.json``), and the alert settings beside them.

At export (:func:`workbench.bundle.export.export_run`) the run's calibration data — the calibrate stage's fit split:
each decision feature's raw values, the shipped decision's P(correct) on them, whether it retrieves (P < τ) and the
OOD flag — become one :class:`SeriesReference` per series (``feature:<name>``, ``p_correct``, ``retrieval``,
``ood``): quantile bin edges with the reference's share in each bin (for PSI) and its sorted values, or evenly spaced
order statistics of them when there are more than :data:`SAMPLE_MAX` (for KS). A binary series (retrieval, OOD) has
the single edge 0.5, so its PSI compares two rates with the same code.

The file is JSON, listed in the manifest's ``files`` and named by ``monitoring.file`` (schema 1.6): read only through
:class:`~workbench.bundle.files.BundleFiles`, so its bytes are the verified ones, and parsed strictly
(:func:`reference_from_dict`: one DataError naming the field). A bundle exported before it has none: monitoring then
says "no reference".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from workbench.core.errors import DataError
from workbench.core.strict_json import loads_strict
from workbench.monitoring.settings import DriftSettings

FORMAT = "workbench-drift-reference"
VERSION = 1
REFERENCE_FILE = "monitoring/reference.json"
"""Where the reference goes inside a bundle (the manifest's ``monitoring.file``)."""

SAMPLE_MAX = 1000
"""The most reference values kept for KS: beyond it, evenly spaced order statistics (the KS distance to them is within
1 / SAMPLE_MAX of the distance to the whole sample)."""

BINARY_EDGES = (0.5,)
"""The one edge of a 0/1 series: bin 0 is 'no', bin 1 is 'yes'."""

FINITE_MAX = float(np.finfo(float).max)


@dataclass(frozen=True)
class SeriesReference:
    """One monitored series' reference: ``n`` values (``missing`` NaN besides), interior bin ``edges`` (ascending,
    distinct; ``len(edges) + 1`` bins, a value ``v`` in bin ``searchsorted(edges, v, side='right')``), the share of
    the ``n`` values in each bin (``proportions``) and a sorted ``sample`` of them for KS (±inf stored as ±float max,
    which keeps the order)."""

    name: str
    n: int
    missing: int
    edges: tuple[float, ...]
    proportions: tuple[float, ...]
    sample: tuple[float, ...]

    @property
    def bins(self) -> int:
        """How many bins the edges make."""
        return len(self.edges) + 1


@dataclass(frozen=True)
class DriftReference:
    """A bundle's reference: the ``split`` of the run it came from and its ``rows``, one :class:`SeriesReference` per
    series name (``feature:<name>``, ``p_correct``, ``retrieval``, ``ood``), and the ``settings``."""

    split: str
    rows: int
    series: dict[str, SeriesReference]
    settings: DriftSettings = field(default_factory=DriftSettings)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``monitoring/reference.json``."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "split": self.split,
            "rows": self.rows,
            "settings": asdict(self.settings),
            "series": {name: _series_dict(s) for name, s in sorted(self.series.items())},
        }


def feature_series(name: str) -> str:
    """The series name of decision feature ``name``."""
    return f"feature:{name}"


def for_ks(values: np.ndarray) -> np.ndarray:
    """``values`` with ±inf as ±float max (JSON holds no infinity; the order, all KS reads, is kept)."""
    return np.clip(np.asarray(values, dtype=float), -FINITE_MAX, FINITE_MAX)


def build_series(name: str, values: Any, bins: int = 10) -> SeriesReference:
    """The reference of one continuous series from its values (NaN counted as missing; ±inf binned at the ends):
    edges at the ``bins``-quantiles of the finite values (values the reference holds), repeated edges merged (a
    feature with few distinct values gets fewer bins)."""
    x = np.asarray(values, dtype=float).reshape(-1)
    present = x[~np.isnan(x)]
    finite = present[np.isfinite(present)]
    # edges at values the reference holds (no empty bin between two distinct values of a discrete feature)
    quantiles = np.linspace(0.0, 1.0, bins + 1)[1:-1]
    edges = np.unique(np.quantile(finite, quantiles, method="inverted_cdf")) if finite.size else np.zeros(0)
    return _series(name, present, int(x.size - present.size), edges)


def build_binary(name: str, flags: Any) -> SeriesReference:
    """The reference of a 0/1 series (retrieval, OOD flag): two bins split at 0.5."""
    x = np.asarray(flags, dtype=float).reshape(-1)
    present = x[~np.isnan(x)]
    return _series(name, present, int(x.size - present.size), np.asarray(BINARY_EDGES))


def _series(name: str, present: np.ndarray, missing: int, edges: np.ndarray) -> SeriesReference:
    counts = np.bincount(np.searchsorted(edges, present, side="right"), minlength=edges.size + 1)
    shares = counts / max(present.size, 1)
    ordered = np.sort(for_ks(present))
    if ordered.size > SAMPLE_MAX:  # evenly spaced order statistics
        ordered = ordered[np.round(np.linspace(0, ordered.size - 1, SAMPLE_MAX)).astype(int)]
    return SeriesReference(
        name,
        int(present.size),
        missing,
        tuple(float(e) for e in edges),
        tuple(float(s) for s in shares),
        tuple(float(v) for v in ordered),
    )


def build_reference(
    split: str,
    features: Mapping[str, Any],
    p_correct: Any,
    retrieve: Any,
    ood: Any | None,
    settings: DriftSettings,
    bins: int = 10,
) -> DriftReference:
    """The reference of ``split``'s rows: each of ``features`` (name → raw values), P(correct), the retrieval
    decision and (when the bundle has an OOD flag) the flag, one value per row each."""
    series = {
        feature_series(name): build_series(feature_series(name), v, settings.bins) for name, v in features.items()
    }
    series["p_correct"] = build_series("p_correct", p_correct, settings.bins)
    series["retrieval"] = build_binary("retrieval", retrieve)
    if ood is not None:
        series["ood"] = build_binary("ood", ood)
    rows = int(np.asarray(p_correct).size)
    return DriftReference(split, rows, series, settings)


def _series_dict(series: SeriesReference) -> dict[str, Any]:
    out = asdict(series)
    out.pop("name")
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def reference_from_dict(data: Any, where: str) -> DriftReference:
    """A :class:`DriftReference` from the parsed JSON of ``monitoring/reference.json``; DataError (one line naming
    the field) on anything malformed: wrong format or version, a non-finite or unordered edge, shares that are not a
    distribution over the bins, an unsorted sample, settings out of range."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DataError(f"not a drift reference (format must be {FORMAT!r})", where)
    if data.get("version") != VERSION:
        raise DataError(f"drift reference version must be {VERSION}", where)
    split, rows = data.get("split"), data.get("rows")
    if not isinstance(split, str) or not _count(rows):
        raise DataError("'split' must be a string and 'rows' a count", where)
    settings = data.get("settings")
    try:
        if not isinstance(settings, dict) or set(settings) - {f for f in DriftSettings.__dataclass_fields__}:
            raise ValueError("'settings' must be a mapping of psi_alarm, psi_warn, alpha, window, min_count, bins")
        _numbers(settings)
        parsed = DriftSettings(**settings)
    except (TypeError, ValueError) as exc:
        raise DataError(f"settings: {exc}", where) from None
    series = data.get("series")
    if not isinstance(series, dict) or not series:
        raise DataError("'series' must be a non-empty mapping", where)
    return DriftReference(split, rows, {name: _parse_series(name, s, where) for name, s in series.items()}, parsed)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _numbers(settings: dict[str, Any]) -> None:
    for key, value in settings.items():
        integral = key in ("window", "min_count", "bins")
        ok = isinstance(value, int) if integral else isinstance(value, int | float)
        if not ok or isinstance(value, bool):
            raise ValueError(f"'{key}' must be {'an integer' if integral else 'a number'}")


def _floats(value: Any, field_name: str, where: str) -> tuple[float, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        raise DataError(f"'{field_name}' must be a list of numbers", where)
    if not all(math.isfinite(v) for v in value):
        raise DataError(f"'{field_name}' must be finite", where)
    return tuple(float(v) for v in value)


def _parse_series(name: Any, data: Any, where: str) -> SeriesReference:
    label = f"series.{str(name)[:80]}"
    if not isinstance(name, str) or not isinstance(data, dict):
        raise DataError(f"'{label}' must be a mapping", where)
    expected = {"n", "missing", "edges", "proportions", "sample"}
    if set(data) != expected:
        raise DataError(f"'{label}' must have exactly the keys {sorted(expected)}", where)
    if not (_count(data["n"]) and _count(data["missing"])):
        raise DataError(f"'{label}.n' and '{label}.missing' must be counts", where)
    edges = _floats(data["edges"], f"{label}.edges", where)
    shares = _floats(data["proportions"], f"{label}.proportions", where)
    sample = _floats(data["sample"], f"{label}.sample", where)
    if any(b <= a for a, b in itertools.pairwise(edges)):
        raise DataError(f"'{label}.edges' must be strictly increasing", where)
    if len(shares) != len(edges) + 1 or any(s < 0 for s in shares) or abs(sum(shares) - 1.0) > 1e-6:
        raise DataError(f"'{label}.proportions' must be one share per bin (len(edges) + 1), summing to 1", where)
    if data["n"] == 0 or not sample or len(sample) > min(data["n"], SAMPLE_MAX):
        raise DataError(f"'{label}.sample' must hold 1 to min(n, {SAMPLE_MAX}) values", where)
    if any(b < a for a, b in itertools.pairwise(sample)):
        raise DataError(f"'{label}.sample' must be sorted", where)
    return SeriesReference(name, data["n"], data["missing"], edges, shares, sample)


def read_reference(files: Any, manifest: Mapping[str, Any], where: str) -> DriftReference | None:
    """The bundle's reference through its verified files (:class:`~workbench.bundle.files.BundleFiles`), or None for
    a bundle without one (exported before schema 1.6, or without a decision); DataError when it is malformed."""

    block = manifest.get("monitoring")
    if not isinstance(block, dict) or block.get("file") is None:
        return None
    name = files.name(block["file"], "monitoring.file")
    data = files.read(name, "monitoring.file")
    return reference_from_dict(loads_strict(data, f"{where}: {name}"), f"{where}: {name}")
