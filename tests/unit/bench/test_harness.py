"""The benchmarks' one timing harness: warm-up, rotated rounds, the ``min_seconds`` extension, medians with their
spread, ratios within one measurement, and the thread counts recorded."""

from __future__ import annotations

import pytest

from workbench.bench import harness
from workbench.bench.harness import measure, ratio, spread, thread_counts


class FakeClock:
    """A ``perf_counter`` that only the ways advance, so every run's time is what the way says it took."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(harness.time, "perf_counter", fake)
    return fake


def ways_taking(clock: FakeClock, seconds: dict[str, float], calls: list[str]) -> dict[str, object]:
    def way(name: str):
        def call() -> str:
            calls.append(name)
            clock.now += seconds[name]
            return f"{name}-{len(calls)}"

        return call

    return {name: way(name) for name in seconds}


def test_every_way_is_warmed_once_then_timed_in_rotated_rounds(clock):
    calls: list[str] = []
    measured = measure(ways_taking(clock, {"a": 1.0, "b": 2.0, "c": 4.0}, calls), repeats=3)
    assert calls == ["a", "b", "c", "a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert measured.warm == {"a": "a-1", "b": "b-2", "c": "c-3"}
    assert measured.rounds == 3
    assert measured.seconds("b") == [2.0, 2.0, 2.0]
    assert measured.values("a") == ["a-4", "a-9", "a-11"]


def test_without_warm_up_only_timed_runs_happen(clock):
    calls: list[str] = []
    measured = measure(ways_taking(clock, {"a": 1.0, "b": 1.0}, calls), repeats=2, warm=False)
    assert calls == ["a", "b", "b", "a"] and measured.warm == {}


def test_short_rounds_are_repeated_until_min_seconds_at_most_max_factor_times(clock):
    calls: list[str] = []
    # one round takes 0.3 s: 2 repeats give 0.6 s, so rounds go on until 1.0 s is spent (4 rounds = 1.2 s)
    assert measure(ways_taking(clock, {"a": 0.1, "b": 0.2}, calls), repeats=2, min_seconds=1.0).rounds == 4
    # a target out of reach stops at max_factor × repeats rounds
    assert measure(ways_taking(clock, {"a": 0.1}, calls), repeats=2, min_seconds=1e9, max_factor=3).rounds == 6


def test_ratios_compare_medians_of_the_same_rounds(clock):
    measured = measure(ways_taking(clock, {"fast": 1.0, "slow": 3.0, "free": 0.0}, []), repeats=3)
    assert measured.median("slow") == 3.0
    assert measured.ratio("slow", "fast") == 3.0
    assert measured.ratio("fast", "free") is None


def test_spread_gives_the_median_quartiles_and_extremes():
    summary = spread([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (summary.median, summary.q1, summary.q3, summary.low, summary.high) == (3.0, 2.0, 4.0, 1.0, 5.0)
    assert summary.iqr == 2.0
    assert spread([7.0]).iqr == 0.0 and spread([7.0]).median == 7.0
    with pytest.raises(ValueError, match="no values"):
        spread([])


def test_ratio_of_nothing_is_none():
    assert ratio(2.0, 4.0) == 0.5 and ratio(2.0, 0.0) is None


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="repeats must be >= 1, got 0"):
        measure({"a": lambda: None}, repeats=0)
    with pytest.raises(ValueError, match="no way"):
        measure({}, repeats=1)


def test_thread_counts_are_the_ones_the_process_runs_with(monkeypatch):
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "2")
    assert thread_counts() == {"torch": torch.get_num_threads(), "omp_num_threads": "3", "blas": "2"}
    monkeypatch.delenv("MKL_NUM_THREADS")
    assert thread_counts()["blas"] is None
