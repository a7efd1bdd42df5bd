"""The protocol's columns — decision accuracy, retrieval calls (RC) and LM calls (LMC) per question — on hand-made
cases: the routing table's rows, the evaluate summary's decision accuracy from no_rag's answers, and both tables'
Markdown; and the classify stage trains k-NN and tree routers into its routing table."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.unit.core.test_calibrate_classify import _ctx
from tests.unit.stages.test_classify_router import _rows, calibrated_collection
from workbench.core.errors import DataError
from workbench.methods.evaluation import decision_accuracies
from workbench.metrics.adaptive import decision_accuracy
from workbench.stages.classify import run as classify
from workbench.stages.classify.report import routing_table_lines
from workbench.stages.classify.run import routing_table
from workbench.stages.evaluate.report import evaluate_section


def test_decision_accuracy_counts_decisions_that_match_the_closed_book_error():
    retrieved = [True, True, False, False, True]
    wrong = [True, False, False, True, True]
    assert decision_accuracy(retrieved, wrong) == pytest.approx(3 / 5)
    assert math.isnan(decision_accuracy([], []))
    with pytest.raises(DataError, match="3 decisions for 2 labels"):
        decision_accuracy([True] * 3, [True] * 2)


def _cols() -> dict[str, np.ndarray]:
    """Four questions: closed-book right on the first two; RAG right on the last three."""
    closed, rag = np.array([1.0, 1.0, 0.0, 0.0]), np.array([0.0, 1.0, 1.0, 1.0])
    cols = {f"correct_{s}": closed for s in ("em", "f1", "contains")}
    cols |= {f"rag_{s}": rag for s in ("em", "f1", "contains")}
    ones = np.ones(4)
    cols |= {"rag_prompt_tokens": 10 * ones, "rag_new_tokens": 2 * ones, "closed_prompt_tokens": 5 * ones}
    cols |= {"closed_new_tokens": 2 * ones, "lm_calls": 3 * ones, "prefill_tokens": 20 * ones}
    cols |= {"decoded_tokens": 4 * ones, "scored_tokens": 0 * ones}
    return cols


def test_the_routing_table_gives_decision_accuracy_rc_and_lmc_per_row():
    router = np.array([False, True, True, False])  # right on questions 0 and 2, wrong on 1 and 3
    rows = {row["router"]: row for row in routing_table(_cols(), {"conf": router})}
    expected = {  # (decision accuracy, RC, LMC)
        "No-RAG": (0.5, 0.0, 1.0),  # right where the closed-book answer is right
        "Always-RAG": (0.5, 1.0, 1.0),
        "Oracle": (1.0, 0.5, 1.5),  # retrieves exactly where the closed-book answer is wrong
        "conf": (0.5, 0.5, 3.5),  # the feature collection's 3 calls + the RAG answer on half the questions
    }
    for name, (in_acc, rc, lmc) in expected.items():
        row = rows[name]
        assert (row["decision_accuracy"], row["retrieval_calls"], row["lm_calls"]) == pytest.approx(
            (in_acc, rc, lmc)
        ), name


def test_the_routing_table_markdown_shows_the_columns_and_a_dash_for_an_older_table():
    rows = routing_table(_cols(), {"conf": np.array([False, True, True, False])})
    old = {k: v for k, v in rows[0].items() if k not in ("decision_accuracy", "retrieval_calls")} | {"router": "old"}
    lines = routing_table_lines({"rows": [*rows, old], "unit": None}, "test")
    header = next(line for line in lines if line.startswith("| router"))
    assert "| decision accuracy | retrieval rate | RC / q | LMC / q |" in header
    oracle = next(line for line in lines if line.startswith("| Oracle"))
    assert "| 1.000 | 0.50 | 0.50 | 1.50 |" in oracle
    assert "| – | 0.00 | – |" in next(line for line in lines if line.startswith("| old"))


def _record(method: str, qid: str, contains: float, retrieved: bool) -> dict:
    return {"method": method, "id": qid, "contains": contains, "retrieved": retrieved}


def test_the_evaluate_decision_accuracy_takes_its_label_from_no_rags_answers():
    records = [
        _record("no_rag", "a", 1.0, False),
        _record("no_rag", "b", 0.0, False),
        _record("no_rag", "c", 0.0, False),
        _record("adaptive", "a", 1.0, True),  # wrong: no_rag got it right
        _record("adaptive", "b", 1.0, True),  # right
        _record("adaptive", "c", 0.0, False),  # wrong: no_rag got it wrong
        _record("adaptive", "d", 1.0, True),  # no closed-book label: left out
    ]
    assert decision_accuracies(records) == pytest.approx({"no_rag": 1 / 3, "adaptive": 1 / 3})
    assert decision_accuracies([r for r in records if r["method"] != "no_rag"]) is None


def test_the_evaluate_table_shows_the_columns(tmp_path):
    row = {"em": 0.5, "f1": 0.5, "contains": 0.5, "retrieval_rate": 0.25, "lm_calls": 1.25, "tokens": 40.0}
    row |= {"nli_pairs": 0.0, "latency_p50": 0.1, "latency_p95": 0.2, "fallbacks": 0}
    methods = {"no_rag": row | {"retrieval_rate": 0.0, "decision_accuracy": 0.5, "retrieval_calls": 0.0}}
    methods["flat"] = row | {"decision_accuracy": 0.75, "retrieval_calls": 0.25}
    methods["older"] = dict(row)
    summary = {"split": "test", "questions": 4, "methods": methods, "order": list(methods)}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    lines = evaluate_section(tmp_path, tmp_path)
    assert any("| decision accuracy | retrieval rate | RC / q | LMC / q |" in line for line in lines)
    assert "| 0.750 | 0.25 | 0.25 | 1.2 |" in next(line for line in lines if line.startswith("| flat"))
    assert "| – | 0.25 | – |" in next(line for line in lines if line.startswith("| older"))


def test_the_classify_stage_trains_knn_and_tree_routers_into_its_routing_table(tmp_path):
    collect_dir, cal_dir = calibrated_collection(tmp_path, _rows(160, 20), _rows(120, 21))
    section = {"seeds": [0], "kinds": ["knn", "tree"], "router_search": "none", "knn_neighbors": 9}
    ctx = _ctx(tmp_path, "classify", {"calibrate": cal_dir, "collect": collect_dir}, classify=section)
    summary = classify.run(ctx)
    assert summary["chosen"] in ("knn", "tree") and summary["onnx_max_abs_diff"] <= 1e-5
    rows = {row["router"]: row for row in json.loads((ctx.out_dir / "routing.json").read_text())["rows"]}
    assert {"kNN", "Tree"} <= set(rows) and rows["Oracle"]["decision_accuracy"] == 1.0
    for name in ("kNN", "Tree"):
        assert 0.0 <= rows[name]["decision_accuracy"] <= 1.0
        assert rows[name]["retrieval_calls"] == rows[name]["retrieval_rate"]
    assert (ctx.out_dir / "knn.safetensors").is_file() and (ctx.out_dir / "tree.onnx").is_file()
