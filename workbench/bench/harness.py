"""The one timing harness of the benchmarks: warm-up, repeats in rotated order, medians with their spread, ratios
taken within one measurement, and the thread counts the timings ran under.

A benchmark names the *ways* it compares (``{"greedy": fn, "batched": fn, ...}``, each a callable of no arguments)
and :func:`measure` runs them:

* every way once untimed first (``warm``): imports, lazily built sessions, kernels, caches and connections are paid
  before any timing; the warm-up's return values are kept (a benchmark reads outputs and costs from them);
* then ``repeats`` rounds of all the ways, round r starting with way r mod k (rotated order: no way is always
  measured first, on a cold cache or a busy neighbour's turn, or always right after another), and more rounds while
  the timed rounds took less than ``min_seconds`` in all (at most ``max_factor × repeats``: a short measurement,
  noisier on a shared machine, gets more runs);
* each timed run is one :func:`time.perf_counter` interval around the call, kept with what the call returned.

:class:`Measured` gives each way's times and their :class:`Spread` (median, quartiles and interquartile range, min,
max) and the ratio of two ways' medians, so every ratio a report shows compares timings of the same rounds.
:func:`thread_counts` records the torch, OpenMP and BLAS thread counts the process ran with (the runner sets torch's
and OpenMP's from the recipe's ``threads``: :func:`workbench.stages.runner.run_recipe`).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Spread:
    """The median of some timings with their quartiles (``q1``, ``q3``), interquartile range and extremes."""

    median: float
    q1: float
    q3: float
    low: float
    high: float

    @property
    def iqr(self) -> float:
        """The interquartile range ``q3 - q1`` (0 for a single value)."""
        return self.q3 - self.q1


def spread(values: Sequence[float]) -> Spread:
    """The :class:`Spread` of ``values`` (quartiles by linear interpolation between the sorted values, the one
    value's own for a single value). Raises ``ValueError`` for no values."""
    if not values:
        raise ValueError("no values to summarise")
    median = statistics.median(values)
    q1, q3 = statistics.quantiles(values, n=4, method="inclusive")[::2] if len(values) > 1 else (median, median)
    return Spread(median=median, q1=q1, q3=q3, low=min(values), high=max(values))


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``, None when the denominator is 0 (nothing to compare against)."""
    return numerator / denominator if denominator else None


@dataclass(frozen=True)
class Run:
    """One timed call: its wall time and what it returned."""

    seconds: float
    value: Any


def timed(fn: Callable[[], Any]) -> Run:
    """Call ``fn`` once under :func:`time.perf_counter`."""
    began = time.perf_counter()
    value = fn()
    return Run(time.perf_counter() - began, value)


@dataclass
class Measured:
    """What :func:`measure` found: ``warm`` (each way's warm-up return value, empty when it ran none), ``runs`` (each
    way's timed runs, in the order measured) and ``rounds`` (how many rounds ran)."""

    warm: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, list[Run]] = field(default_factory=dict)
    rounds: int = 0

    def seconds(self, way: str) -> list[float]:
        """Every timed run's seconds of ``way``, in the order measured."""
        return [run.seconds for run in self.runs[way]]

    def values(self, way: str) -> list[Any]:
        """What each timed run of ``way`` returned, in the order measured."""
        return [run.value for run in self.runs[way]]

    def spread(self, way: str) -> Spread:
        """The :class:`Spread` of ``way``'s times."""
        return spread(self.seconds(way))

    def median(self, way: str) -> float:
        """``way``'s median seconds."""
        return statistics.median(self.seconds(way))

    def ratio(self, way: str, baseline: str) -> float | None:
        """``way``'s median over ``baseline``'s (both from these rounds); None when the baseline's median is 0."""
        return ratio(self.median(way), self.median(baseline))


def measure(
    ways: Mapping[str, Callable[[], Any]],
    repeats: int,
    *,
    warm: bool = True,
    min_seconds: float = 0.0,
    max_factor: int = 10,
) -> Measured:
    """Warm every way once (untimed, unless ``warm`` is false: the benchmark warmed them itself), then time
    ``repeats`` rounds of all of them in rotated order, and more rounds while the timed rounds took less than
    ``min_seconds`` in all (at most ``max_factor × repeats``). Raises ``ValueError`` for ``repeats`` < 1 or no way."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if not ways:
        raise ValueError("no way to measure")
    names = list(ways)
    measured = Measured(runs={name: [] for name in names})
    if warm:
        measured.warm = {name: ways[name]() for name in names}
    spent = 0.0
    while measured.rounds < repeats or (spent < min_seconds and measured.rounds < max_factor * repeats):
        shift = measured.rounds % len(names)
        measured.rounds += 1
        for name in names[shift:] + names[:shift]:
            run = timed(ways[name])
            measured.runs[name].append(run)
            spent += run.seconds
    return measured


def thread_counts() -> dict[str, Any]:
    """The thread counts this process computes with: torch's intra-op threads (``torch``), and as set in the
    environment (None when unset) ``OMP_NUM_THREADS`` (``omp_num_threads``) and the BLAS libraries' own
    ``OPENBLAS_NUM_THREADS`` / ``MKL_NUM_THREADS`` (``blas``: the first set; unset, BLAS follows OpenMP)."""
    import torch

    blas = next((os.environ[name] for name in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS") if name in os.environ), None)
    return {"torch": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "blas": blas}
