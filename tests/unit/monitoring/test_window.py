"""The rolling window serve keeps: a window of the configured size, and an answer log whose failure never fails the
answers."""

from __future__ import annotations

import errno
import io
import json

import pytest

from workbench.core.errors import StorageError
from workbench.monitoring.reference import build_reference
from workbench.monitoring.settings import DriftSettings
from workbench.monitoring.window import RollingMonitor

RECORD = {"time": 1.0, "method": "d2rag", "p_correct": 0.3, "tau": 0.5, "features": {"x": 1.0}, "ood": False}


class FullDisk(io.StringIO):
    """A log file on a full disk: every write fails."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def _reference():
    settings = DriftSettings(window=10, min_count=5)
    return build_reference("calib", {"x": [float(i) for i in range(50)]}, [0.6] * 50, [0.0] * 50, None, settings)


def test_the_window_keeps_the_last_answers_and_the_log_one_line_each(tmp_path):
    monitor = RollingMonitor.open(_reference(), "b", "1.0.0", tmp_path / "log.jsonl")
    monitor.add_records([{**RECORD, "time": float(t)} for t in range(15)])
    monitor.close()
    assert monitor.answers == 15 and len(monitor.window()["feature:x"]) == 10  # the window's size, not all
    assert monitor.window_mean("retrieval") == 1.0  # 0.3 < τ 0.5 every time
    lines = (tmp_path / "log.jsonl").read_text().splitlines()
    assert [json.loads(line)["time"] for line in lines] == [float(t) for t in range(15)]


def test_a_failing_answer_log_stops_with_one_error_and_never_fails_the_answers(caplog):
    monitor = RollingMonitor(_reference(), "b", "1.0.0", FullDisk())
    monitor.add_records([RECORD])
    monitor.add_records([RECORD])  # the log is closed now: nothing more is tried
    assert monitor.answers == 2 and monitor.log_error and "OSError" in monitor.log_error
    assert monitor.summary()["answer_log_error"] == monitor.log_error
    assert sum("answer log stopped" in r.getMessage() for r in caplog.records) == 1


def test_an_answer_log_that_cannot_be_opened_fails_before_serving(tmp_path):
    with pytest.raises(StorageError, match="cannot open the answer log"):
        RollingMonitor.open(None, "b", "1.0.0", tmp_path / "missing-dir" / "log.jsonl")


def test_an_answer_with_only_what_serve_requires_is_monitored():
    class Minimal:  # ServableRuntime's answers need only to_dict() and ood
        def __init__(self) -> None:
            self.ood = {"flag": True, "checks": ["question_form"], "action": "reported"}

        def to_dict(self) -> dict:
            return {}

    monitor = RollingMonitor(None, "b", "1.0.0")
    monitor.add([Minimal(), Minimal()])
    assert monitor.answers == 2 and monitor.window_mean("ood") == 1.0 and "p_correct" not in monitor.window()
