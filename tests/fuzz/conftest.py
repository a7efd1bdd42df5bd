"""Fuzz suite set-up: the Hypothesis profile (tests/fuzz/common.py) and, with ``WORKBENCH_FUZZ_REPORT``, the case
counts written at the end of the session."""

from __future__ import annotations

import os

from tests.fuzz import common


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("WORKBENCH_FUZZ_REPORT")
    if path:
        common.write_report(path)
