"""The feature-cost benchmark report: each ratio of the whole collection against the bare generation with its target
and verdict, and every wall time with its spread."""

from __future__ import annotations

from workbench.bench.features.report import bare_lines


def _cost(seconds: float, forwards: int, runs: int = 3) -> dict:
    return {
        "seconds": seconds,
        "seconds_min": seconds * 0.9,
        "seconds_max": seconds * 1.2,
        "seconds_runs": [seconds] * runs,
        "token_forwards": forwards,
        "lm_calls": 4,
    }


def test_bare_lines_give_each_ratio_its_target_and_the_spread():
    bench = {
        "features": ["confidence", "ptrue"],
        "core_features": ["confidence"],
        "bare": _cost(10.0, 100),
        "naive": _cost(30.0, 300),
        "workbench_core": _cost(11.0, 100),
        "workbench": {**_cost(25.0, 200), "prefix_reused_tokens": 40},
        "ratios": {
            "workbench_over_bare": {"seconds": 2.6, "token_forwards": 2.0},
            "workbench_core_over_bare": {"seconds": 1.1, "token_forwards": 1.0},
            "workbench_over_naive": {"seconds": 25 / 30, "token_forwards": 2 / 3},
        },
    }
    text = "\n".join(bare_lines(bench))
    assert "| all 2 features / engine bare | 2.60x | 2.00x | ≤ 2.5x **not met** |" in text
    assert "| 1 features (no self-prompting) / engine bare | 1.10x | 1.00x | ≤ 1.15x met |" in text
    assert "| all 2 features / transformers `generate` | 0.83x | 0.67x | ≤ 1x met |" in text
    assert "25.0 (22.5–30.0)" in text and "all but ptrue" in text
    # only the workbench way reused prompt prefixes (a bench.json from before issue 31 has no such count: 0)
    assert "| token-forwards saved by prefix reuse | 0 | 0 | 0 | 40 |" in text.splitlines()
