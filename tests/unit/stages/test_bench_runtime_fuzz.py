"""The bench-runtime stage's fuzz step: profile ``none`` runs nothing and records no fuzz section (the section
itself: tests/unit/reports/test_runtime.py)."""

from __future__ import annotations

from workbench.bench.runtime.run import _fuzz


def test_profile_none_runs_no_fuzzing(tmp_path):
    assert _fuzz("none", tmp_path) is None
