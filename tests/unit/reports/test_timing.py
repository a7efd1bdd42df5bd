"""The report's time table: seconds and peak resident memory per stage, read from the run directory."""

from __future__ import annotations

import json

from workbench.reports.timing import stage_times, time_lines


def _stage(run_dir, name, summary):
    (run_dir / "stages" / name).mkdir(parents=True)
    (run_dir / "stages" / name / "_stage.json").write_text(json.dumps({"summary": summary}))


def test_the_table_shows_each_stage_peak_and_the_largest(tmp_path):
    _stage(tmp_path, "collect", {"seconds": 12.0, "peak_rss_mb": 812.4})
    _stage(tmp_path, "distill", {"seconds": 30.5, "peak_rss_mb": 2950.0})
    _stage(tmp_path, "old", {"seconds": 1.0})  # computed before the runner recorded memory
    (tmp_path / "manifest.json").write_text(json.dumps({"stages": {"collect": {"cached": True}}}))
    times = stage_times(tmp_path, ["collect", "distill", "old", "never_ran"])
    assert times == [("collect", 12.0, False, 812.4), ("distill", 30.5, True, 2950.0), ("old", 1.0, True, None)]
    lines = time_lines(times, 43.5, 31.0, None)
    assert "| collect | 12.0 | 812 | no (cached) |" in lines
    assert "| distill | 30.5 | 2950 | yes |" in lines
    assert "| old | 1.0 | - | yes |" in lines
    assert any("**2.95 GB**" in line for line in lines)


def test_without_any_recorded_peak_there_is_no_memory_sentence(tmp_path):
    _stage(tmp_path, "old", {"seconds": 1.0})
    lines = time_lines(stage_times(tmp_path, ["old"]), 1.0, 1.0, None)
    assert not any("resident memory" in line for line in lines)
