"""The one number / table formatter of the reports: missing and non-finite values print alike everywhere."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.core.formatting import MISSING, fmt, markdown_table


def test_missing_and_non_finite_values_print_as_one_mark():
    assert [fmt(v) for v in (None, math.nan, math.inf, -math.inf, np.float32("nan"))] == [MISSING] * 5


def test_numbers_print_by_kind():
    assert fmt(0.12345) == "0.123" and fmt(0.12345, 2) == "0.12" and fmt(np.float64(2.0), 1, suffix="x") == "2.0x"
    assert fmt(1234.5678, 4, style="g") == "1235" and fmt(0.25, 0, style="%") == "25%"
    assert fmt(3) == "3" and fmt(np.int64(7)) == "7" and fmt(True) == "True" and fmt("LR") == "LR"


def test_markdown_table_aligns_and_checks_widths():
    lines = markdown_table(["router", "EM", "rate"], [["LR", 0.5, None], ["No-RAG", 1, "all"]])
    assert lines == ["| router | EM | rate |", "|---|---:|---:|", f"| LR | 0.500 | {MISSING} |", "| No-RAG | 1 | all |"]
    assert markdown_table(["a", "b"], [], align="ll")[1] == "|---|---|"
    with pytest.raises(ValueError, match="2 columns"):
        markdown_table(["a", "b"], [[1]])
    with pytest.raises(ValueError, match="align"):
        markdown_table(["a", "b"], [], align="lx")


def test_counted_uses_the_singular_for_one():
    from workbench.core.formatting import counted

    assert [counted(n, "test question") for n in (0, 1, 32)] == [
        "0 test questions",
        "1 test question",
        "32 test questions",
    ]
