"""The runtime benchmark report's fuzz section: case counts per property, the total, and whether every property
held (the serve section: tests/unit/serve/test_bench_serve.py, from live measurements)."""

from __future__ import annotations

from workbench.bench.runtime.report import fuzz_lines


def test_the_fuzz_section_counts_cases_per_property():
    fuzz = {
        "profile": "bench",
        "passed": True,
        "summary": "11 passed in 90.0s",
        "seconds": 90.4,
        "properties": {
            "bundle manifest": {"cases": 300, "refused": 289, "accepted": 11},
            "http body": {"cases": 300, "refused": 300},
        },
    }
    text = "\n".join(fuzz_lines(fuzz))
    assert "profile `bench`" in text and "**600 cases** in 90 s: every property held" in text
    assert "| bundle manifest | 300 | 289 | 11 |" in text and "| http body | 300 | 300 | 0 |" in text
    assert "FAILED" in "\n".join(fuzz_lines({**fuzz, "passed": False}))
    assert fuzz_lines(None) == []
