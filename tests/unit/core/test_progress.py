"""Progress where output is not a terminal: rate-limited lines (n of N, rate, ETA) instead of a silent bar."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

import workbench.core.logs as logs
from workbench.core.logs import ProgressLines, duration_text, progress, setup_logging, track

ROOT = Path(__file__).resolve().parents[3]


class Clock:
    """A time source the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _lines(total, steps, seconds_per_step, **kwargs):
    """The lines a :class:`ProgressLines` writes for ``steps`` steps of ``seconds_per_step`` each, then closed."""
    clock, out = Clock(), []
    lines = ProgressLines("collect (test)", total, emit=out.append, clock=clock, **kwargs)
    for _ in range(steps):
        clock.now += seconds_per_step
        lines.advance()
    lines.close()
    return out


def test_a_line_per_tenth_with_rate_elapsed_and_eta():
    out = _lines(100, 100, 1.0)
    assert len(out) == 10  # nine tenths, then the last line
    assert out[0] == "collect (test): 10 of 100 (10%), 1.0/s, elapsed 0:10, ETA 1:30"
    assert out[4] == "collect (test): 50 of 100 (50%), 1.0/s, elapsed 0:50, ETA 0:50"
    assert out[-1] == "collect (test): 100 of 100 (100%) in 1:40, 1.0/s"


def test_a_fast_loop_writes_only_its_last_line():
    out = _lines(1000, 1000, 0.002)
    assert out == ["collect (test): 1000 of 1000 (100%) in 0:02, 500.0/s"]


def test_slow_steps_print_seconds_each_and_a_line_per_minute_between_tenths():
    out = _lines(1000, 30, 7.0)  # a tenth would take 700 s: the minute rule speaks instead
    assert len(out) == 1 + 3  # at 63 s, 126 s, 189 s, then the last line
    assert out[0] == "collect (test): 9 of 1000 (0%), 7.0 s each, elapsed 1:03, ETA 1:55:37"


def test_at_most_one_line_per_min_interval_even_when_tenths_pass():
    out = _lines(20, 20, 1.0)  # a tenth every 2 s, but at most one line per 10 s
    assert [line.split(":")[1].split(",")[0] for line in out[:-1]] == [" 10 of 20 (50%)"]


def test_unknown_total_and_a_resumed_count():
    assert _lines(None, 130, 1.0)[:2] == [
        "collect (test): 60, 1.0/s, elapsed 1:00",
        "collect (test): 120, 1.0/s, elapsed 2:00",
    ]
    clock, out = Clock(), []
    lines = ProgressLines("study", 10, completed=5, emit=out.append, clock=clock)
    clock.now = 20.0
    lines.update(6, note="best 0.71")
    assert out == ["study: 6 of 10 (60%), 20.0 s each, elapsed 0:20, ETA 1:20, best 0.71"]  # only the 1 new trial


def test_duration_text():
    assert [duration_text(s) for s in (0, 42.4, 725, 3723)] == ["0:00", "0:42", "12:05", "1:02:03"]


def test_track_logs_lines_and_no_bar_when_not_a_terminal(tmp_path, monkeypatch):
    monkeypatch.setattr(logs, "is_terminal", lambda: False)
    setup_logging("info", tmp_path / "run.log")
    try:
        assert list(track(range(4), "answer (rag)")) == [0, 1, 2, 3]
    finally:
        setup_logging("info")  # drop the file handler
    text = (tmp_path / "run.log").read_text()
    assert "workbench.progress: answer (rag): 4 of 4 (100%) in 0:00" in text


def test_no_last_line_when_the_block_fails(monkeypatch):
    monkeypatch.setattr(logs, "is_terminal", lambda: False)
    out = []
    monkeypatch.setattr(logs, "_emit_line", out.append)
    with progress("collect", 3) as shown:
        shown.advance(3)
    assert len(out) == 1 and out[0].startswith("collect: 3 of 3 (100%) in 0:00")
    out.clear()
    with pytest.raises(RuntimeError), progress("collect", 3) as shown:
        shown.advance()
        raise RuntimeError("boom")
    assert out == []


def test_a_terminal_gets_the_bar_not_lines(monkeypatch, caplog):
    monkeypatch.setattr(logs, "is_terminal", lambda: True)
    monkeypatch.setattr(logs, "is_quiet", lambda: False)
    caplog.set_level(logging.INFO, logger="workbench.progress")
    assert list(track(range(3), "answer (rag)")) == [0, 1, 2]
    assert not [r for r in caplog.records if r.name == "workbench.progress"]


def test_shown_false_is_silent(monkeypatch, caplog):
    monkeypatch.setattr(logs, "is_terminal", lambda: False)
    caplog.set_level(logging.INFO, logger="workbench.progress")
    with progress("x", 2, shown=False) as shown:
        shown.advance(2)
    assert not caplog.records


def test_output_to_a_pipe_prints_progress_lines():
    """A real non-TTY stream: stdout and stderr are pipes, no logging configured (as ``workbench infer`` runs)."""
    code = (
        "import time\n"
        "from workbench.core.logs import track\n"
        "for _ in track(range(3), 'infer (d2rag)'): time.sleep(0.01)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert "infer (d2rag): 3 of 3 (100%) in 0:00" in done.stderr
    assert "━" not in done.stdout + done.stderr  # no bar was drawn


def test_a_log_line_is_not_wrapped_when_output_is_not_a_terminal(monkeypatch, capsys):
    import logging as std_logging

    monkeypatch.setattr(logs, "is_terminal", lambda: False)
    monkeypatch.setattr(logs, "is_quiet", lambda: False)
    setup_logging("info")
    line = "collect (test): 120 of 500 (24%), 3.1/s, elapsed 0:38, ETA 2:02, " + "x" * 80
    std_logging.getLogger("workbench.progress").info(line)
    printed = [text for text in capsys.readouterr().out.splitlines() if "collect (test)" in text]
    assert len(printed) == 1 and printed[0].endswith(f"INFO {line}")  # rich would fold it at 80 columns and pad it
