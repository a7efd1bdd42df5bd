"""The retrievers-by-ΔSePer plot carries the intervals its table prints."""

from __future__ import annotations

import json

from tests.plot_capture import error_bars
from workbench.stages.seper_eval.report import seper_section


def _entry(mean_s, low_s, high_s):
    return {
        "delta_seper_s": {"mean": mean_s, "low": low_s, "high": high_s},
        "delta_seper_h": {"mean": mean_s / 2, "low": low_s / 2, "high": high_s / 2},
        "gold_recall": 0.8,
        "seper_s": 0.6,
        "seper_s_closed": 0.3,
    }


def test_the_plot_has_an_error_bar_per_interval(tmp_path, drawn):
    summary = {
        "retrievers": {"bm25": _entry(0.12, 0.05, 0.2), "dense": _entry(-0.03, -0.1, 0.04)},
        "ranking": ["bm25", "dense"],
        "questions": 30,
        "split": "calib",
        "k": 3,
        "passages": 120,
    }
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    lines = seper_section(tmp_path, tmp_path)
    assert "| 1 | bm25 | +0.120 (+0.050 – +0.200) " in lines[-5]
    (ax,) = drawn
    assert [(round(x, 1), round(lo, 6), round(hi, 6)) for x, lo, hi in sorted(error_bars(ax))] == [
        (-0.2, 0.05, 0.2),
        (0.2, 0.025, 0.1),
        (0.8, -0.1, 0.04),
        (1.2, -0.05, 0.02),
    ]
    assert "90% intervals of the mean" in " ".join(ax.get_title().split())
