"""bench-features' breakdown of the workbench's time by stats-graph component: the medians over the timed runs and
the report table that shows where the time goes."""

from __future__ import annotations

import pytest

from workbench.bench.features.report import COMPONENT_ORDER, component_lines, cost_lines
from workbench.bench.features.run import median_components
from workbench.uncertainty.stat_costs import COMPONENTS


def _cost(seconds: float, lm_calls: float = 0.0, **more: float) -> dict[str, float]:
    fields = ("prefill_tokens", "decoded_tokens", "scored_tokens", "nli_pairs", "embed_texts")
    return {"seconds": seconds, "lm_calls": lm_calls, **dict.fromkeys(fields, 0.0), **more}


def test_the_table_knows_every_component_in_the_graphs_order():
    assert tuple(COMPONENTS) == COMPONENT_ORDER


def test_median_components_takes_each_fields_median_and_counts_a_missing_component_as_zero():
    runs = [
        {"greedy": _cost(1.0, 8), "paraphrase": _cost(5.0, 40)},
        {"greedy": _cost(3.0, 8), "paraphrase": _cost(4.0, 40)},
        {"greedy": _cost(2.0, 8)},  # a run where the component did not run: 0 there
    ]
    out = median_components(runs)
    assert list(out) == ["greedy", "paraphrase"]  # the order the components ran in
    assert out["greedy"]["seconds"] == 2.0 and out["greedy"]["lm_calls"] == 8
    assert out["paraphrase"]["seconds"] == 4.0 and out["paraphrase"]["lm_calls"] == 40
    assert median_components([]) == {}


def test_component_table_shows_each_components_share_and_the_self_prompting_sum():
    bench = {
        "features": ["confidence", "ptrue", "self_detection"],
        "bare": {"seconds": 4.0},
        "workbench": {"seconds": 10.0},
        "workbench_components": {
            "greedy": _cost(1.0, 8, prefill_tokens=400, decoded_tokens=60),
            "samples": _cost(3.0, 8, prefill_tokens=400, decoded_tokens=300),
            "paraphrase": _cost(3.5, 40, prefill_tokens=2000, decoded_tokens=700),
            "self_check": _cost(2.0, 8, prefill_tokens=1600, scored_tokens=64),
            "nli_paraphrase": _cost(0.5, nli_pairs=60, embed_texts=30),
        },
    }
    bench["workbench_components"] = dict(sorted(bench["workbench_components"].items()))  # as bench.json holds them
    lines = component_lines(bench)
    text = "\n".join(lines)
    # the rows in the order the stats graph runs the components, not bench.json's sorted keys
    firsts = [line.split(" | ")[0] for line in lines if line.startswith("| ") and " | " in line][1:]
    assert firsts[:5] == [
        "| greedy answer",
        "| N samples",
        "| Self-Detection: paraphrases + their answers",
        "| P(True) + Verbalized: self-check forward",
        "| NLI: paraphrase answers' matrix",
    ]
    row = next(line for line in lines if line.startswith("| Self-Detection: paraphrases"))
    assert row.split(" | ")[1:4] == ["3.50", "35%", "0.88x"]  # of the run's 10 s; of the 4 s bare generation
    assert "| 40 | 2000 | 700 | 0 | 0 | 0 |" in row
    rest = next(line for line in lines if line.startswith("| not in a component"))
    assert rest.split(" | ")[1:3] == ["0.00", "0%"]  # 1 + 3 + 3.5 + 2 + 0.5 = the whole run
    # paraphrase + self_check + nli_paraphrase = 6 s = 1.50x bare; the other 4 s = 1.00x
    assert "take 6.00 s, 1.50x the engine's bare generation; the rest of the run 1.00x" in text


def test_component_table_states_time_outside_every_component():
    bench = {
        "features": ["confidence"],
        "bare": {"seconds": 2.0},
        "workbench": {"seconds": 3.0},
        "workbench_components": {"greedy": _cost(2.5, 8)},
    }
    rest = next(line for line in component_lines(bench) if line.startswith("| not in a component"))
    assert rest.split(" | ")[1:3] == ["0.50", "17%"]
    assert "take 0.00 s" in "\n".join(component_lines(bench))


@pytest.mark.parametrize("with_parts", [True, False])
def test_cost_report_has_the_component_section_only_when_measured(with_parts):
    cost = {"seconds": 1.0, "token_forwards": 10, "lm_calls": 1, "nli_pairs": 0, "embed_texts": 0}
    bench = {
        "questions": 1,
        "generator": "tiny",
        "nli_judge": "answer_equivalence",
        "threads": 1,
        "features": ["confidence"],
        "settings": {"split": "test", "samples": 2, "temperature": 0.7, "max_new_tokens": 4, "paraphrases": 3},
        "workbench": cost,
        "bare": cost,
        "naive": cost,
        "library_total": cost,
        "per_feature_total": cost,
        "library": {"confidence": cost},
        "per_feature": {"confidence": cost},
        "ratios": {
            "library_over_workbench": dict.fromkeys(cost, 1.0),
            "per_feature_over_workbench": dict.fromkeys(cost, 1.0),
            "workbench_over_bare": {"seconds": 1.0, "token_forwards": 1.0},
            "workbench_over_naive": {"seconds": 1.0, "token_forwards": 1.0},
        },
    }
    if with_parts:
        bench["workbench_components"] = {"greedy": _cost(0.5, 1)}
    assert ("## Where the workbench's time goes" in cost_lines(bench, "workbench run x")) is with_parts
