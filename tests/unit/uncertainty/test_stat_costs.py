"""Per-component costs of the stats graph: the tables, pricing a feature subset, the meter on the tiny Llama."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.unit.uncertainty.helpers import HashEmbedder
from workbench.backends.nli import AnswerEquivalenceJudge
from workbench.core.errors import DataError
from workbench.uncertainty.calculators import UNAVAILABLE_STATS, StatSettings, compute_stats, unavailable_features
from workbench.uncertainty.dense_stats import DenseSettings
from workbench.uncertainty.features import FEATURES, required_stats
from workbench.uncertainty.stat_costs import (
    COMPONENTS,
    COST_FIELDS,
    STAT_COMPONENTS,
    StatCostMeter,
    components_cost,
    feature_components,
    load_stat_costs,
    stat_costs_document,
    summarise_split_costs,
)
from workbench.uncertainty.stats import STATS

QUESTIONS = [{"question": "What is the capital of France?"}, {"question": "Who wrote Hamlet?"}]
CONTEXTS = [["Paris is in France.", "It is big."], ["Hamlet is a play."]]
SETTINGS = StatSettings(samples=3, max_new_tokens=5, paraphrases=3, paraphrase_max_new_tokens=6)
DENSE = DenseSettings(rephrase_max_new_tokens=6, answer_max_new_tokens=4)
ALL_STATS = required_stats([n for n in FEATURES if n not in unavailable_features(FEATURES)])
ALL_STATS |= {"greedy_entropies", "greedy_text", "sample_texts"}


def _run(generator, judge, embedder, meter=None):
    return compute_stats(
        QUESTIONS,
        ALL_STATS,
        generator=generator,
        judge=judge,
        embedder=embedder,
        settings=SETTINGS,
        contexts=CONTEXTS,
        dense_settings=DENSE,
        cost_meter=meter,
    )


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        x, y = np.asarray(a), np.asarray(b)
        return x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


def test_every_stat_is_mapped_and_every_component_is_used():
    assert set(STAT_COMPONENTS) == set(STATS)
    used = set().union(*STAT_COMPONENTS.values())
    assert used == set(COMPONENTS)
    fields = ("lm_calls", "prefill_tokens", "decoded_tokens", "scored_tokens", "nli_pairs", "embed_texts", "seconds")
    assert fields == COST_FIELDS
    for name in FEATURES:  # every feature prices, the greedy answer always included
        assert "greedy" in feature_components([name])


def test_feature_components_price_only_what_the_features_need():
    assert feature_components(["confidence"]) == {"greedy"}
    assert feature_components(["confidence", "dtr_nll", "mars", "lars"]) == {"greedy"}
    assert feature_components(["semantic_entropy"]) >= {"greedy", "samples", "nli_answers"}
    assert "paraphrase" not in feature_components(["semantic_entropy"])
    assert feature_components(["self_detection"]) == {"greedy", "paraphrase", "nli_paraphrase"}
    assert feature_components(["dense"]) == {"greedy", "dense"}
    assert feature_components(["ptrue"]) == {"greedy", "samples", "self_check"}
    assert feature_components(["token_sar", "sent_sar"]) == {"greedy", "samples", "token_relevance", "sts"}
    assert feature_components([]) == {"greedy"}


def test_components_cost_counts_shared_components_once_and_refuses_unmeasured_ones():
    per_question = {
        "greedy": dict.fromkeys(COST_FIELDS, 1.0),
        "samples": {**dict.fromkeys(COST_FIELDS, 0.0), "lm_calls": 3.0, "decoded_tokens": 10.0},
    }
    cost = components_cost(["greedy", "samples", "greedy"], per_question)
    assert cost["lm_calls"] == 4.0 and cost["decoded_tokens"] == 11.0 and cost["nli_pairs"] == 1.0
    with pytest.raises(DataError, match="nli_answers"):
        components_cost(feature_components(["semantic_entropy"]), per_question)


def test_the_meter_splits_every_counted_cost_over_the_components(generator):
    judge, embedder = AnswerEquivalenceJudge(), HashEmbedder()
    meter = StatCostMeter(generator, judge, embedder)
    g0, j0, e0 = generator.counter.snapshot(), judge.counter.snapshot(), embedder.counter.snapshot()
    with_meter = _run(generator, judge, embedder, meter)
    g, j, e = generator.counter.since(g0), judge.counter.since(j0), embedder.counter.since(e0)
    totals = meter.totals()
    assert list(totals) == list(COMPONENTS)  # every component ran, in order

    def total(key):
        return sum(row[key] for row in totals.values())

    assert total("lm_calls") == pytest.approx(g.lm_calls + g.cached_lm_calls + j.lm_calls)
    assert total("prefill_tokens") == pytest.approx(g.prefill_tokens + g.cached_prefill_tokens)
    assert total("decoded_tokens") == pytest.approx(g.decoded_tokens + g.cached_decoded_tokens)
    assert total("scored_tokens") == pytest.approx(g.scored_tokens)
    assert total("nli_pairs") == pytest.approx(j.nli_pairs + g.nli_pairs) and total("nli_pairs") > 0
    assert total("embed_texts") == pytest.approx(e.embed_texts) and e.embed_texts > 0
    extra = SETTINGS.paraphrases - 1
    # paraphrasing: one prompt per question (its P - 1 samples share it), then one greedy answer per paraphrase
    assert totals["paraphrase"]["lm_calls"] == pytest.approx(2 + 2 * extra)
    # the greedy decode read the attention diagonal (its cost is the greedy call's): no attention pass
    assert totals["attention"]["lm_calls"] == 0 and totals["attention"]["scored_tokens"] == 0
    assert totals["self_check"]["lm_calls"] == 2 and totals["self_check"]["nli_pairs"] == 0
    assert totals["greedy"]["nli_pairs"] == 0 and totals["samples"]["nli_pairs"] == 0
    assert (
        totals["nli_answers"]["nli_pairs"] + totals["nli_paraphrase"]["nli_pairs"]
        == j.nli_pairs - (totals["dense"]["nli_pairs"])
    )
    assert totals["token_relevance"]["embed_texts"] > 0 and totals["sts"]["embed_texts"] == 2 * SETTINGS.samples
    assert totals["dense"]["lm_calls"] > 0 and totals["dense"]["nli_pairs"] >= 0
    assert all(row["seconds"] >= 0 for row in totals.values())
    assert all(row["cached_lm_calls"] == 0 for row in totals.values())  # no generation cache here

    without_meter = _run(generator, AnswerEquivalenceJudge(), HashEmbedder())
    assert _same(with_meter, without_meter)  # the meter changes nothing


def test_the_meter_prices_a_warm_cache_cold_and_says_how_much_was_cached(generator, tmp_path):
    from workbench.backends.gencache import GenerationCache

    generator.cache = GenerationCache(tmp_path / "g.sqlite")
    try:
        cold, warm = StatCostMeter(generator), StatCostMeter(generator)
        needed = {"greedy_logprobs", "greedy_eos", "sample_logprobs", "paraphrase_answers", "paraphrase_nli_probs"}
        judge = AnswerEquivalenceJudge()
        first = compute_stats(QUESTIONS, needed, generator=generator, judge=judge, settings=SETTINGS, cost_meter=cold)
        again = compute_stats(QUESTIONS, needed, generator=generator, judge=judge, settings=SETTINGS, cost_meter=warm)
    finally:
        generator.cache = None
    assert _same(first, again)
    a, b = cold.totals(), warm.totals()
    for component in ("greedy", "samples", "paraphrase"):
        assert b[component]["lm_calls"] == pytest.approx(a[component]["lm_calls"]), component
        assert b[component]["prefill_tokens"] == pytest.approx(a[component]["prefill_tokens"]), component
        assert b[component]["cached_lm_calls"] == pytest.approx(b[component]["lm_calls"]), component
        assert a[component]["cached_lm_calls"] == 0, component
    split = summarise_split_costs([warm.per_question(2)] * 2)
    assert split["questions"] == 2 and 0.9 < split["cached_share"] <= 1.0
    assert summarise_split_costs([cold.per_question(2)] * 2)["cached_share"] == 0.0
    assert split["per_question"]["greedy"]["lm_calls"] == pytest.approx(b["greedy"]["lm_calls"] / 2)


def test_stat_costs_document_round_trips_and_malformed_files_are_refused(tmp_path):
    meter = StatCostMeter()
    mark = meter.mark()
    meter.charge(mark, "greedy")
    meter.charge_shares(meter.mark(), {"nli_answers": 3, "nli_paraphrase": 1})
    rows = [meter.per_question(2), meter.per_question(2)]
    doc = stat_costs_document(
        ["confidence", "self_detection"], {"test": rows}, {"test": {"retriever_seconds": 0.1, "rag_answer_seconds": 1}}
    )
    assert doc["features"] == {"confidence": ["greedy"], "self_detection": ["greedy", "nli_paraphrase", "paraphrase"]}
    assert set(doc["splits"]["test"]["per_question"]) == {"greedy", "nli_answers", "nli_paraphrase"}
    assert load_stat_costs(tmp_path) is None  # an older collection: no file, callers fall back
    (tmp_path / "stat_costs.json").write_text(json.dumps(doc))
    assert load_stat_costs(tmp_path) == json.loads(json.dumps(doc))
    for bad in ("{not json", "[]", json.dumps({**doc, "splits": {"test": {"per_question": {"greedy": {}}}}})):
        (tmp_path / "stat_costs.json").write_text(bad)
        with pytest.raises(DataError, match="stat costs"):
            load_stat_costs(tmp_path)
    broken = json.loads(json.dumps(doc))
    broken["splits"]["test"]["per_question"]["greedy"]["lm_calls"] = "many"
    (tmp_path / "stat_costs.json").write_text(json.dumps(broken))
    with pytest.raises(DataError, match="greedy"):
        load_stat_costs(tmp_path)


def test_unavailable_stats_still_have_components():
    assert set(STAT_COMPONENTS) >= UNAVAILABLE_STATS
