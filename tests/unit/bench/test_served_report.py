"""bench-served's report states served collection against in-process in issue 46's exact form."""

from __future__ import annotations

from workbench.bench.served.report import collection_lines, report_lines


def _bench(rates: dict[str, float]) -> dict:
    row = {
        "rates": {c: {"questions_per_s": r} for c, r in rates.items()},
        "vs_in_process": rates["16"] / 2.0,
        "vs_own_lowest": rates["16"] / rates["1"],
        "capabilities": {"n": True},
        "skipped": {},
        "agreement": {"greedy_identical": 1.0},
    }
    return {
        "settings": {"concurrency": [1, 16]},
        "in_process": {"questions_per_s": 2.0, "batch_size": 8},
        "questions": 4,
        "features": [],
        "accuracy": 0.5,
        "engines": {"serve_model": row},
    }


def test_the_line_names_the_highest_concurrency_and_its_ratio_to_in_process():
    bench = _bench({"1": 0.5, "16": 1.7})
    assert [line for line in collection_lines(bench) if line] == [
        "`serve_model`: served collection at concurrency 16: 0.85x in-process"
    ]
    assert "`serve_model`: served collection at concurrency 16: 0.85x in-process" in report_lines(bench)
