"""Fair timing in the benchmark stages: warm-up of every way, rotated order, medians with their spread, the naive
transformers baseline's counts, the ratio verdicts, and EOS off in the decoding benchmark."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workbench.backends.cost import CostCounter
from workbench.core.errors import ConfigError
from workbench.stages import bench_features
from workbench.stages.bench_features import bare_lines, measure_ways, naive_generate


def test_measure_ways_warms_up_then_rotates_the_order():
    calls: list[str] = []
    counter = CostCounter()

    def way(name: str, tokens: int):
        def run() -> None:
            calls.append(name)
            counter.decoded_tokens += tokens

        return run

    out = measure_ways(counter, {"a": way("a", 1), "b": way("b", 2), "c": way("c", 3)}, repeats=3)
    # one untimed warm-up of each way, then three rounds, each starting one way later
    assert calls == ["a", "b", "c", "a", "b", "c", "b", "c", "a", "c", "a", "b"]
    for name, tokens in (("a", 1), ("b", 2), ("c", 3)):
        cost = out[name]
        assert cost["token_forwards"] == tokens and len(cost["seconds_runs"]) == 3
        assert cost["seconds_min"] <= cost["seconds"] <= cost["seconds_max"]
        assert cost["seconds"] == sorted(cost["seconds_runs"])[1]  # the median
    with pytest.raises(ValueError, match="repeats"):
        measure_ways(counter, {"a": way("a", 1)}, repeats=0)


def test_validate_section_names_the_key():
    section = SimpleNamespace(
        features=["confidence"],
        questions=2,
        samples=2,
        max_new_tokens=4,
        paraphrases=2,
        repeats=0,
        per_feature_repeats=1,
    )
    with pytest.raises(ConfigError, match=r"bench_features\.repeats"):
        bench_features.validate_section(section)
    section.repeats, section.features = 3, ["no_such_feature"]
    with pytest.raises(ConfigError):
        bench_features.validate_section(section)


def test_naive_generate_counts_one_prefill_per_sample(tiny_lm_dir):
    from workbench.backends.generator import Generator

    generator = Generator(tiny_lm_dir)
    prompts = [generator.render_chat("Who wrote Hamlet?"), generator.render_chat("Where is Paris?")]
    widths = [len(generator.encode_prompt(p, 10**6)) for p in prompts]
    naive_generate(generator, prompts, samples=3, temperature=0.7, max_new_tokens=4, stop=())
    cost = generator.counter
    assert cost.lm_calls == 4 and cost.lm_batches == 4
    assert cost.prefill_tokens == sum(w * (1 + 3) for w in widths)  # the prompt re-encoded for each sample
    assert 0 < cost.decoded_tokens <= 2 * (4 + 3 * 4)


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
        "workbench": _cost(25.0, 200),
        "ratios": {
            "workbench_over_bare": {"seconds": 2.5, "token_forwards": 2.0},
            "workbench_core_over_bare": {"seconds": 1.1, "token_forwards": 1.0},
            "workbench_over_naive": {"seconds": 25 / 30, "token_forwards": 2 / 3},
        },
    }
    text = "\n".join(bare_lines(bench))
    assert "| all 2 features / engine bare | 2.50x | 2.00x | ≤ 2x **not met** |" in text
    assert "| 1 features (no self-prompting) / engine bare | 1.10x | 1.00x | ≤ 1.15x met |" in text
    assert "| all 2 features / transformers `generate` | 0.83x | 0.67x | ≤ 1x met |" in text
    assert "25.0 (22.5–30.0)" in text and "all but ptrue" in text
    assert "3.00x the engine's time" in text and "5.9x" in text and "4.4x" in text


def test_benchmark_contrastive_can_decode_past_eos(tiny_lm_dir):
    from workbench.backends.generator import Generator
    from workbench.stages.bench_decoding import benchmark_contrastive

    generator = Generator(tiny_lm_dir)
    eos = generator.eos_ids
    generator.eos_ids = frozenset(range(generator.model.config.vocab_size))  # every token ends an answer
    experts = [generator.render_chat("Who wrote Hamlet?")]
    amateurs = [generator.render_chat("Hamlet?")]
    stopped = benchmark_contrastive(generator, experts, amateurs, max_new_tokens=5, repeats=1)
    assert stopped["steps"]["batched"] == 1 and stopped["steps"]["greedy"] == 1
    full = benchmark_contrastive(generator, experts, amateurs, max_new_tokens=5, repeats=3, ignore_eos=True)
    assert generator.eos_ids == frozenset(range(generator.model.config.vocab_size))  # restored
    assert all(full["steps"][v] == 5 for v in ("greedy", "batched", "sequential", "padded"))
    assert full["forwards"]["greedy"] == 5 and full["ignore_eos"] is True
    for variant, (low, high) in full["spread_s"].items():
        assert low <= full[f"{variant}_s"] <= high and len(full["times_s"][variant]) == 3
    generator.eos_ids = eos
