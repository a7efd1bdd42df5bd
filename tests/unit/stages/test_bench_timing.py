"""Fair timing in the benchmark stages: warm-up of every way, rotated order, medians with their spread, the naive
transformers baseline's counts, and EOS off in the decoding benchmark (the ratio verdicts:
tests/unit/reports/test_feature_cost.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workbench.backends.cost import CostCounter
from workbench.bench.features import run as bench_features
from workbench.bench.features.run import measure_ways, naive_generate
from workbench.core.errors import ConfigError


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


def test_benchmark_contrastive_can_decode_past_eos(tiny_lm_dir):
    from workbench.backends.generator import Generator
    from workbench.bench.decoding.run import benchmark_contrastive

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


def test_benchmark_contrastive_adds_rounds_until_min_seconds(tiny_lm_dir):
    from workbench.backends.generator import Generator
    from workbench.bench.decoding.run import benchmark_contrastive

    generator = Generator(tiny_lm_dir)
    experts, amateurs = [generator.render_chat("Who wrote Hamlet?")], [generator.render_chat("Hamlet?")]

    def run(**kwargs) -> dict:
        result = benchmark_contrastive(generator, experts, amateurs, max_new_tokens=2, **kwargs)
        assert all(len(times) == result["repeats"] for times in result["times_s"].values())
        return result

    assert run(repeats=2)["repeats"] == 2  # no min_seconds: repeats only
    assert run(repeats=2, min_seconds=1e9)["repeats"] == 20  # never reached: capped at 10 x repeats
    # otherwise it stops at the first round that brings the timed total to min_seconds
    result = run(repeats=1, min_seconds=0.2)
    per_round = [sum(times[r] for times in result["times_s"].values()) for r in range(result["repeats"])]
    assert sum(per_round) >= 0.2 or result["repeats"] == 10
    assert result["repeats"] == 1 or sum(per_round[:-1]) < 0.2
