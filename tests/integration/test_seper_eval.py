"""The seper-eval recipe shrunk: tiny generator, real corpus, every retriever ranked by ΔSePer."""

from __future__ import annotations

import json

import pytest

from workbench.recipe import load_recipe
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration


def test_seper_eval_ranks_every_retriever(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, monkeypatch):
    import datasets

    from workbench.methods.dtr import DTR

    searched = []  # what DTR's two paths search: the dense row's own index (the paper's dense retrieval)
    real_search = DTR._search

    def spy(self, queries, k):
        searched.append((type(self.retriever).__name__, len(self.retriever.corpus), len(queries), k))
        return real_search(self, queries, k)

    monkeypatch.setattr(DTR, "_search", spy)
    run_recipe(
        load_recipe(
            "seper-eval",
            [
                f"generator.model={tiny_lm_long_dir}",
                f"embedder.model={tiny_encoder_dir}",
                f"run_dir={tmp_path}/run",
                f"report.dir={tmp_path}/report",
                "tracker=none",
                "threads=0",
                "data.max_per_template=10",
                "seper_eval.limit=2",
                "seper_eval.samples=2",
                "seper_eval.k=2",
                "seper_eval.max_new_tokens=4",
                "seper_eval.corpus_size=200",
            ],
        )
    )
    stage = tmp_path / "run" / "stages" / "seper_eval"
    summary = json.loads((stage / "summary.json").read_text())
    assert sorted(summary["ranking"]) == ["bm25", "dense", "dtr", "gold", "hybrid", "random"]
    for entry in summary["retrievers"].values():
        s = entry["delta_seper_s"]
        assert -1.0 <= s["low"] <= s["mean"] <= s["high"] <= 1.0
    rows = datasets.load_from_disk(str(stage / "per_question"))
    assert len(rows) == 12 and all(len(ids) <= 2 for ids in rows["passage_ids"])
    controls = {r: [x for x in rows if x["retriever"] == r] for r in ("gold", "random")}
    assert all(x["gold_retrieved"] == 1.0 for x in controls["gold"])  # the controls are what they say
    assert all(x["gold_retrieved"] == 0.0 and len(x["passage_ids"]) == 2 for x in controls["random"])
    closed = {}  # SePer without context is one number per question, whichever retriever's row it sits in
    for qid, value in zip(rows["id"], rows["seper_s_closed"], strict=True):
        assert closed.setdefault(qid, value) == pytest.approx(value)
    assert len(closed) == 2
    # forced to retrieve: the question path of both questions searches the 200 passages' dense index (the random
    # model's pseudo-contexts are empty, so there is no second path)
    assert searched == [("DenseRetriever", 200, 2, 5)]
    report = (tmp_path / "report" / "report.md").read_text()
    assert "ranked by retrieval utility" in report and "| dtr |" in report
