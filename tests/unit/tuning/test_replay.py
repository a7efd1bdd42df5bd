"""Replay tables: the branch chosen per question, costs priced uncached, traces that are not always-retrieve refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.core.errors import DataError
from workbench.tuning.replay import replay_table


def _record(qid, nll, closed, final, retrieve=True, cached=0.0):
    steps = [
        {
            "name": "closed_book",
            "seconds": 1.0,
            "detail": {"nll": nll, "answer": closed, "retrieve": retrieve},
            "cost": {"lm_calls": 1.0, "prefill_tokens": 10.0, "decoded_tokens": 2.0},
        },
        {
            "name": "generate",
            "seconds": 2.0,
            "detail": {},
            "cost": {
                "lm_calls": 0.0,
                "prefill_tokens": 0.0,
                "decoded_tokens": 0.0,
                "cached_lm_calls": 1.0,
                "cached_prefill_tokens": 50.0 + cached,
                "cached_decoded_tokens": 3.0,
            },
        },
    ]
    trace = {"method": "dtr", "retrieved": True, "steps": steps}
    return {
        "id": qid,
        "trace": json.dumps(trace),
        "em": float(final == "Paris"),
        "f1": float(final == "Paris"),
        "contains": float(final == "Paris"),
    }


EXAMPLES = [{"answers": ["Paris"], "options": []}, {"answers": ["Paris"], "options": []}, {"answers": ["Paris"]}]


def test_threshold_picks_the_branch_per_question_and_prices_cached_calls():
    records = [
        _record("a", 0.2, "Paris", "Lyon"),
        _record("b", 1.5, "Rome", "Paris"),
        _record("c", np.inf, "", "Paris"),
    ]
    table = replay_table("dtr", records, EXAMPLES)
    assert list(table.decisions(1.0)) == [False, True, True]
    at_one = table.evaluate(1.0)  # a: closed right; b, c: retrieval right
    assert at_one["contains"] == 1.0 and at_one["retrieval_rate"] == pytest.approx(2 / 3)
    assert at_one["lm_calls"] == pytest.approx((1 + 2 + 2) / 3)  # the cached final answer counts as a call
    assert at_one["tokens"] == pytest.approx((12 + 65 + 65) / 3) and at_one["cached_tokens"] == pytest.approx(106 / 3)
    assert table.evaluate(0.0)["contains"] == pytest.approx(2 / 3)  # always retrieve: a goes wrong
    never = table.evaluate(np.inf)
    assert never["retrieval_rate"] == 0.0 and never["contains"] == pytest.approx(1 / 3) and never["latency"] == 1.0


def test_d2rag_retrieves_below_tau():
    steps = [
        {
            "name": "features",
            "seconds": 1.0,
            "detail": {"closed_book_answer": "Paris", "closed_book_is_answer": True},
            "cost": {},
        },
        {"name": "decide", "seconds": 0.0, "detail": {"p_correct": 0.3, "retrieve": True}, "cost": {}},
        {"name": "generate", "seconds": 1.0, "detail": {}, "cost": {"lm_calls": 2.0}},
    ]
    record = {
        "id": "a",
        "trace": json.dumps({"method": "d2rag", "retrieved": True, "steps": steps}),
        "em": 0.0,
        "f1": 0.0,
        "contains": 0.0,
    }
    table = replay_table("d2rag", [record], EXAMPLES[:1])
    assert table.evaluate(0.5)["retrieval_rate"] == 1.0 and table.evaluate(0.5)["contains"] == 0.0
    assert table.evaluate(0.3)["retrieval_rate"] == 0.0 and table.evaluate(0.3)["contains"] == 1.0


def test_a_trace_that_did_not_retrieve_is_refused():
    with pytest.raises(DataError, match="not an always-retrieve run"):
        replay_table("dtr", [_record("a", 0.2, "x", "y", retrieve=False)], EXAMPLES[:1])
    with pytest.raises(DataError, match="no replayable threshold"):
        replay_table("dense_rag", [], [])


def test_dense_breakpoints_split_every_pair_of_distinct_dse_values():
    from workbench.methods.dense_rag.breakpoints import dense_breakpoints

    def record(dse):
        steps = [{"name": "retrieve", "detail": {}}, {"name": "dense", "detail": {"dse": dse}}]
        return {"trace": json.dumps({"steps": steps})}

    points = dense_breakpoints([record(v) for v in (0.4, 0.0, 0.4, 1.1, 0.4)])
    assert points == [0.2, 0.75, 1.15]  # between 0 and 0.4, between 0.4 and 1.1, above 1.1 (0 has nothing below)
    assert dense_breakpoints([record(0.3)]) == [0.15, 0.35]
    assert dense_breakpoints([{"trace": json.dumps({"steps": []})}]) == []
