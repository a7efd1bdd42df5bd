"""bench_runtime's timings through the harness, with fake runtimes and fake cold-start processes: the warm-ups, the
counts and the medians each figure is built from."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from workbench.bench.runtime import run as bench_runtime


class FakeRuntime:
    """Counts ``decide`` calls (which row each got) and ``answer_many`` calls (with their batch size)."""

    def __init__(self) -> None:
        self.decided: list[int] = []
        self.answered: list[tuple[int, int]] = []

    def decide(self, row: dict[str, float]) -> None:
        self.decided.append(int(row["i"]))

    def answer_many(self, questions: list[str], method: str, batch_size: int) -> None:
        self.answered.append((len(questions), batch_size))


def test_the_decision_path_warms_on_fifty_rows_then_times_each_call_over_the_rows_in_turn():
    rows = [{"i": float(i)} for i in range(60)]
    numpy_rt, onnx_rt = FakeRuntime(), FakeRuntime()
    out = bench_runtime._decision_path(numpy_rt, onnx_rt, rows, repeats=70)
    for rt in (numpy_rt, onnx_rt):
        assert rt.decided[:50] == list(range(50))  # the warm-up
        assert rt.decided[50:] == [i % 60 for i in range(70)]  # then every row in turn, wrapping around
    for label in ("numpy", "onnx"):
        assert out[label]["calls"] == 70
        assert 0 <= out[label]["median_ms"] <= out[label]["p95_ms"]


def test_engine_batching_warms_with_one_answer_then_times_each_batch_size_once():
    rt = FakeRuntime()
    out = bench_runtime._engine_batching(rt, ["q"] * 6, "d2rag", batch=3)
    assert rt.answered == [(1, 1), (6, 1), (6, 3)]
    assert out["questions"] == 6 and out["batch"] == 3
    assert out["gain"] == pytest.approx(out["batched_qps"] / out["one_at_a_time_qps"])


def test_cold_starts_run_in_fresh_processes_alternating_sources_never_warmed(monkeypatch, tmp_path):
    started: list[str] = []

    def fake_python(code: str, threads: int) -> dict[str, object]:
        source = "archive" if "unpack-archive" in code else "directory"
        started.append(source)
        seconds = {"directory": [1.0, 3.0, 2.0], "archive": [5.0, 4.0, 6.0]}[source][started.count(source) - 1]
        return {"total_s": seconds, "import_s": seconds / 2, "load_s": seconds / 4, "modules": [f"m{len(started)}"]}

    monkeypatch.setattr(bench_runtime, "_python", fake_python)
    section = SimpleNamespace(cold_starts=3)
    out = bench_runtime._cold_start(Path("bundle"), Path("bundle.tar.gz"), section, 1, tmp_path)
    assert started == ["directory", "archive", "archive", "directory", "directory", "archive"]
    assert out["directory"] == {
        "runs": 3,
        "median_s": 2.0,
        "max_s": 3.0,
        "median_import_s": 1.0,
        "median_load_s": 0.5,
        "modules": ["m1", "m4", "m5"],
    }
    assert out["archive"]["median_s"] == 5.0 and out["archive"]["runs"] == 3
