"""evaluate_method on the tiny model: one record per question, a summary that is the records' means, and honest costs
under the generation cache (what a cached generation saved is counted apart, never as free)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.backends.cost import CostCounter
from workbench.methods.evaluation import (
    MEAN_KEYS,
    MethodEvaluation,
    evaluate_method,
    summarise,
    summary_metrics,
)

ROWS = [
    {"id": "q0", "question": "What is the capital of France?", "answers": ["Paris"]},
    {"id": "q1", "question": "Who wrote Hamlet?", "answers": ["William Shakespeare", "Shakespeare"]},
    {"id": "q2", "question": "Which river flows through Paris?", "answers": ["Seine"]},
]
RECORD_KEYS = {
    "method",
    "id",
    "question",
    "answers",
    "prediction",
    "em",
    "f1",
    "contains",
    "retrieved",
    "decoding",
    "fallbacks",
    "lm_calls",
    "prefill_tokens",
    "decoded_tokens",
    "scored_tokens",
    "nli_pairs",
    "retrieval_calls",
    "cached_lm_calls",
    "cached_prefill_tokens",
    "cached_decoded_tokens",
    "seconds",
    "tokens",
    "cached_tokens",
    "lm_calls_uncached",
    "tokens_uncached",
    "trace",
}
SUMMARY_KEYS = {"n", "retrieval_rate", "latency_p50", "latency_p95", "fallbacks", *MEAN_KEYS}


@pytest.mark.parametrize(("name", "options"), [("no_rag", {}), ("standard_rag", {"k": 2})])
def test_evaluate_method_returns_one_record_per_row_and_their_means(tools, name, options):
    result = evaluate_method(tools, name, options, ROWS, batch_questions=2, progress=False)
    assert isinstance(result, MethodEvaluation) and result.name == name and result.seconds > 0
    assert [r["id"] for r in result.records] == ["q0", "q1", "q2"]
    assert all(set(r) == RECORD_KEYS and r["method"] == name for r in result.records)
    summary = result.summary
    assert set(summary) == SUMMARY_KEYS and summary["n"] == 3
    columns = {"prompt_tokens": "prefill_tokens", "generated_tokens": "decoded_tokens"}
    for key in MEAN_KEYS:
        assert summary[key] == pytest.approx(np.mean([r[columns.get(key, key)] for r in result.records])), key
    assert summary["lm_calls"] == 1.0 and summary["cached_lm_calls"] == summary["cached_tokens"] == 0.0  # no cache
    assert summary["lm_calls_uncached"] == 1.0 and summary["tokens_uncached"] == summary["tokens"] > 0
    assert summary["tokens"] == pytest.approx(summary["prompt_tokens"] + summary["generated_tokens"])
    assert summary["retrieval_rate"] == (1.0 if name == "standard_rag" else 0.0)
    assert summary["latency_p50"] <= summary["latency_p95"] and summary["fallbacks"] == 0
    assert summarise(result.records) == {name: summary}


def test_summary_metrics_summarises_any_subset_and_an_empty_one(tools):
    result = evaluate_method(tools, "no_rag", None, ROWS, progress=False)
    first = summary_metrics(result.records[:1])
    assert first["n"] == 1 and first["tokens"] == result.records[0]["tokens"]
    empty = summary_metrics([])
    assert empty["n"] == 0 and empty["fallbacks"] == 0 and math.isnan(empty["em"]) and math.isnan(empty["latency_p95"])
    assert set(empty) == set(first) == SUMMARY_KEYS


def test_a_cached_rerun_is_free_but_reports_what_it_saved(tools, tmp_path):
    from workbench.backends.gencache import GenerationCache

    tools.generator.cache = GenerationCache(tmp_path / "gen.sqlite")
    try:
        cold = evaluate_method(tools, "standard_rag", {"k": 2}, ROWS, progress=False)
        warm = evaluate_method(tools, "standard_rag", {"k": 2}, ROWS, progress=False)
    finally:
        tools.generator.cache = None
    assert [r["prediction"] for r in warm.records] == [r["prediction"] for r in cold.records]
    # The random model's answers run to max_new_tokens (no EOS or stop token to drop), so the cached answer tokens
    # are exactly the tokens the cold run decoded.
    for before, after in zip(cold.records, warm.records, strict=True):
        assert before["lm_calls"] == 1.0 and before["cached_lm_calls"] == before["cached_tokens"] == 0.0
        assert after["lm_calls"] == after["tokens"] == 0.0
        assert after["cached_lm_calls"] == before["lm_calls"] and after["cached_tokens"] == before["tokens"]
        assert after["cached_prefill_tokens"] == before["prefill_tokens"]
        assert after["cached_decoded_tokens"] == before["decoded_tokens"]
        assert after["lm_calls_uncached"] == before["lm_calls_uncached"]
        assert after["tokens_uncached"] == before["tokens_uncached"]
        assert after["retrieval_calls"] == before["retrieval_calls"] == 1.0  # retrieval is not cached
    assert warm.summary["lm_calls"] == warm.summary["tokens"] == 0.0
    assert warm.summary["cached_lm_calls"] == cold.summary["lm_calls"] == 1.0
    assert warm.summary["cached_tokens"] == pytest.approx(cold.summary["tokens"])
    assert warm.summary["tokens_uncached"] == pytest.approx(cold.summary["tokens_uncached"])


def test_the_cached_counters_count_only_fully_cached_prompts_and_every_cached_sample(tools, tmp_path):
    from workbench.backends.gencache import GenerationCache

    generator = tools.generator
    prompts = ["Question: who wrote Hamlet? Answer:", "The capital of France is"]
    kwargs = {"max_new_tokens": 4, "temperature": 0.8, "stop": None}
    generator.cache = GenerationCache(tmp_path / "gen.sqlite")
    try:
        start = tools.counter.snapshot()
        first = generator.generate(prompts, n=2, **kwargs)
        cold = tools.counter.since(start)
        start = tools.counter.snapshot()
        generator.generate(prompts, n=2, **kwargs)  # every sample cached
        hit = tools.counter.since(start)
        start = tools.counter.snapshot()
        generator.generate(prompts, n=3, **kwargs)  # samples 0 and 1 cached, sample 2 missing: real calls
        partial = tools.counter.since(start)
    finally:
        generator.cache = None
    answer_tokens = sum(len(g.token_ids) for g in first)
    assert (cold.cached_lm_calls, cold.cached_prefill_tokens, cold.cached_decoded_tokens) == (0, 0, 0)
    assert (hit.lm_calls, hit.prefill_tokens, hit.decoded_tokens) == (0, 0, 0)
    assert (hit.cached_lm_calls, hit.cached_prefill_tokens) == (2, cold.prefill_tokens)
    assert hit.cached_decoded_tokens == answer_tokens
    assert (partial.lm_calls, partial.prefill_tokens, partial.cached_lm_calls) == (2, cold.prefill_tokens, 0)
    assert partial.cached_prefill_tokens == 0 and partial.cached_decoded_tokens == answer_tokens


def test_the_cached_counters_add_and_subtract_like_the_others():
    a = CostCounter(lm_calls=1, cached_lm_calls=2, cached_prefill_tokens=30, cached_decoded_tokens=4)
    b = CostCounter(cached_lm_calls=1, cached_prefill_tokens=5, cached_decoded_tokens=6)
    before = a.snapshot()
    a.add(b)
    assert (a.cached_lm_calls, a.cached_prefill_tokens, a.cached_decoded_tokens) == (3, 35, 10)
    spent = a.since(before)
    assert spent.lm_calls == 0
    assert (spent.cached_lm_calls, spent.cached_prefill_tokens, spent.cached_decoded_tokens) == (1, 5, 6)
    assert {"cached_lm_calls", "cached_prefill_tokens", "cached_decoded_tokens"} <= set(a.as_dict())
