"""Measuring the OOD flag on a set of questions: how many it flags (a false-positive rate on in-distribution
questions, a detection rate on shifted ones), with a Wilson interval, and how often each check failed.

The calibrate stage (each measured split), the transfer stage (each condition) and their report sections share it,
so every flag rate the workbench reports is counted and bounded one way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.calibration.ood import CHECKS
from workbench.metrics.bootstrap import LEVEL
from workbench.metrics.proportion import wilson_interval


def flag_summary(
    checks: Sequence[Sequence[str]], level: float = LEVEL, names: Sequence[str] = CHECKS
) -> dict[str, Any]:
    """``{questions, flagged, rate, interval, level, checks}`` of one set of questions, from each question's failed
    checks: the flagged share (None without questions), its Wilson ``interval`` at ``level`` ([low, high]; None
    without questions) and how often each check of ``names`` (default :data:`~workbench.calibration.ood.CHECKS`)
    failed."""

    n = len(checks)
    flagged = sum(1 for failed in checks if failed)
    interval = wilson_interval(flagged, n, level)
    return {
        "questions": n,
        "flagged": flagged,
        "rate": flagged / n if n else None,
        "interval": None if interval is None else list(interval),
        "level": level,
        "checks": {name: sum(1 for failed in checks if name in failed) for name in names},
    }


def describe_rate(summary: dict[str, Any]) -> str:
    """``"12 of 640 (1.9 % [1.2, 2.9])"``: a :func:`flag_summary`'s count, rate and interval in percent."""
    if not summary["questions"]:
        return "no questions"
    low, high = (100 * v for v in summary["interval"])
    return f"{summary['flagged']} of {summary['questions']} ({100 * summary['rate']:.1f} % [{low:.1f}, {high:.1f}])"
