"""classify's pick rule on a collection where retrieval hurts the questions the model already answers: the rule the
recipe names ships its router, the report says why, and ``tau_sweep.json`` sweeps the shipped router's τ."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.unit.core.test_calibrate_classify import _ctx
from tests.unit.stages.test_classify_router import _rows, calibrated_collection
from workbench.stages.classify import run as classify


def _hurt(rows: list[dict], seed: int) -> list[dict]:
    """Retrieval answers the wrong closed-book questions and spoils half of the right ones (a help-desk corpus that
    misleads on general questions)."""
    rng = np.random.default_rng(seed)
    for row in rows:
        spoiled = row["correct_contains"] == 1.0 and rng.random() < 0.5
        for score in ("em", "contains", "f1"):
            row[f"rag_{score}"] = 0.0 if spoiled else 1.0
    return rows


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pick")
    collect_dir, cal_dir = calibrated_collection(tmp, _hurt(_rows(200, 10), 0), _hurt(_rows(160, 11), 1))
    return tmp, collect_dir, cal_dir


def _classify(calibrated, name: str, **pick) -> tuple:
    tmp, collect_dir, cal_dir = calibrated
    section = {"seeds": [0], "kinds": ["logistic"], "router_bootstrap": 300, **pick}
    ctx = _ctx(tmp, name, {"calibrate": cal_dir, "collect": collect_dir}, classify=section)
    classify.run(ctx)
    return ctx.out_dir, json.loads((ctx.out_dir / "router.json").read_text())


def test_best_quality_ships_a_router_that_beats_always_rag(calibrated, tmp_path):
    from workbench.stages.classify.router_report import router_lines

    out, record = _classify(calibrated, "best", pick="best_quality")
    pick = record["pick"]
    assert pick["rule"] == "best_quality" and pick["guard"]["passed"] and pick["guard"]["interval"][0] > 0
    assert record["tau"] <= 1.0 and record["picked"]["quality"] > record["fit_references"][1]["quality"]
    ev = record["evaluation"]
    assert ev["difference"] > 0 and ev["beats_always"] == (ev["difference_interval"][0] > 0)
    selection = json.loads((out / "selection.json").read_text())
    assert selection["router"]["rule"] == "router pick (forward, best quality)"
    text = "\n".join(router_lines(out, tmp_path))
    assert "Pick rule `best_quality` (best quality): the highest routed score" in text
    assert "lies above 0" in text and "`classify.pick: best_quality`" in text


def test_max_quality_under_a_retrieval_budget_ships_a_router_within_it(calibrated):
    _, record = _classify(calibrated, "budget", pick="max_quality_under", pick_max_retrieval_rate=0.3)
    assert record["pick"]["max_retrieval_rate"] == 0.3 and record["pick"]["met"]
    assert record["picked"]["rate"] <= 0.3 and record["tau"] <= 1.0
    singles = [p for p in record["points"] if p["kind"] == "single" and p["rate"] <= 0.3]
    assert record["picked"]["quality"] == max(p["quality"] for p in singles)


def test_the_sweep_is_the_shipped_routers_on_the_evaluation_split(calibrated):
    out, record = _classify(calibrated, "cheap")  # the default rule: cheapest within one point
    assert record["pick"]["rule"] == "cheapest_within" and record["pick"]["epsilon"] == 0.01
    sweep = json.loads((out / "tau_sweep.json").read_text())
    predictions = json.loads((out / "predictions.json").read_text())
    routing = {r["router"]: r for r in json.loads((out / "routing.json").read_text())["rows"]}
    assert sweep["router"] == "Router" and sweep["split"] == "test" and sweep["tau"] == record["tau"]
    assert sweep["questions"] == 160 and sweep["always_rag"] == routing["Always-RAG"]["contains"]
    from workbench.routing.sweep import row_at

    row = row_at(sweep["rows"], predictions["Router"], record["tau"])
    # the sweep's row at the shipped τ is the routing table's Router row, priced the same way
    assert row["retrieval_rate"] == pytest.approx(routing["Router"]["retrieval_rate"])
    assert row["quality"] == pytest.approx(routing["Router"]["contains"])
    assert row["cost"] == pytest.approx(routing["Router"]["cost"])
    assert [r["retrieved"] for r in sweep["rows"]] == sorted({r["retrieved"] for r in sweep["rows"]})


def test_the_tau_sweep_section_marks_the_shipped_and_classifys_tau(calibrated, tmp_path):
    from workbench.stages.classify.router_report import tau_sweep_lines

    out, record = _classify(calibrated, "marks")
    text = "\n".join(tau_sweep_lines(out, tmp_path, 0.5, "decide"))
    assert "### Choosing τ after the run" in text and "**0.500** ← shipped" in text
    assert "← classify's pick" in text and "workbench decide RUN --retrieval-rate R" in text
    assert (tmp_path / "tau_sweep.png").stat().st_size > 2000
    same = "\n".join(tau_sweep_lines(out, tmp_path, float(record["tau"]), "classify"))
    assert "← classify's pick" not in same and "← shipped" in same


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["classify.pick=max_quality_under", "classify.pick_max_retrieval_rate=null"], "classify.pick"),
        (["classify.pick=best_quality"], "classify.pick_max_retrieval_rate"),  # the quickstart's budget, now unread
        (
            ["classify.pick=best_quality", "classify.pick_max_retrieval_rate=null", "classify.pick_max_tokens=3"],
            "tokens",
        ),
        (["classify.pick=max_quality_under", "classify.pick_max_retrieval_rate=1.2"], "pick_max_retrieval_rate"),
        (["classify.router_delta=1.5"], "classify.router_delta"),
    ],
)
def test_a_recipe_with_a_bad_pick_rule_is_refused_at_load_naming_the_key(overrides, key):
    from workbench.core.errors import ConfigError
    from workbench.recipe import load_recipe

    with pytest.raises(ConfigError, match=key):
        load_recipe("quickstart", overrides)
