"""classify's router search on a synthetic collection with per-stat costs: the shipped router, its files, its row in
the routing table, the report section, and D²-RAG's Stage 1 reading it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.unit.core.test_calibrate_classify import _ctx  # the stage context the calibrate tests build
from workbench.stages.calibrate import run as calibrate
from workbench.stages.classify import run as classify

COMPONENTS = {
    "greedy": {"lm_calls": 1.0, "prefill_tokens": 90.0, "decoded_tokens": 10.0, "seconds": 0.2},
    "samples": {"lm_calls": 1.0, "prefill_tokens": 90.0, "decoded_tokens": 50.0, "seconds": 0.8},
    "nli_answers": {"nli_pairs": 20.0, "seconds": 0.3},
}


def _rows(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        signal = rng.normal()
        correct = float(rng.random() < 1 / (1 + np.exp(-3.0 * signal)))
        rows.append(
            {
                "position": i,
                "id": f"q{i}",
                "greedy_answer": "France",  # no question column: no OOD flag (it reads build_data's questions)
                "confidence": float(signal),
                "semantic_entropy": float(rng.normal()),
                **{f"correct_{s}": correct for s in ("em", "contains", "f1")},
                **{f"rag_{s}": 1.0 for s in ("em", "contains", "f1")},
                "closed_prompt_tokens": 90.0,
                "closed_new_tokens": 10.0,
                "rag_prompt_tokens": 500.0,
                "rag_new_tokens": 10.0,
                "lm_calls": 2.0,
                "prefill_tokens": 180.0,
                "decoded_tokens": 60.0,
                "scored_tokens": 0.0,
                "nli_pairs": 20.0,
                "seconds": 1.3,
            }
        )
    return rows


def calibrated_collection(tmp, calib: list[dict], test: list[dict]):
    """A collection of ``calib`` and ``test`` rows with per-stat costs (:data:`COMPONENTS`, a 510-token retrieval)
    under ``tmp / "collect"``, calibrated: ``(collect_dir, calibrate_dir)``."""
    import datasets

    from workbench.uncertainty.stat_costs import COST_FIELDS

    collect_dir = tmp / "collect"
    collect_dir.mkdir()
    for split, rows in (("calib", calib), ("test", test)):
        datasets.Dataset.from_list(rows).save_to_disk(str(collect_dir / split))
    summary = {"features": ["confidence", "semantic_entropy"], "splits": {"calib": {}, "test": {}}}
    (collect_dir / "summary.json").write_text(json.dumps(summary))
    full = {name: {**dict.fromkeys(COST_FIELDS, 0.0), **values} for name, values in COMPONENTS.items()}
    per_split = {"questions": 100, "per_question": full, "cached_share": 0.0}
    retrieval = {"retriever_seconds": 0.05, "rag_answer_seconds": 0.6, "rag_prompt_tokens": 500, "rag_new_tokens": 10}
    stat_costs = {
        "splits": {"calib": per_split, "test": per_split},
        "retrieval": {"calib": retrieval, "test": retrieval},
    }
    (collect_dir / "stat_costs.json").write_text(json.dumps(stat_costs))
    cal = _ctx(tmp, "calibrate", {"collect": collect_dir})
    calibrate.run(cal)
    return collect_dir, cal.out_dir


@pytest.fixture(scope="module", params=["forward", "study"])
def routed(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"router-{request.param}")
    collect_dir, cal_dir = calibrated_collection(tmp, _rows(160, 0), _rows(120, 1))
    section = {"seeds": [0], "kinds": ["logistic"], "router_search": request.param, "router_trials": 20}
    section["router_delta"] = 0.05
    section["router_bootstrap"] = 300
    ctx = _ctx(tmp, "classify", {"calibrate": cal_dir, "collect": collect_dir}, classify=section)
    summary = classify.run(ctx)
    return request.param, tmp, cal_dir, ctx.out_dir, summary


def test_the_search_ships_the_cheap_informative_router_with_its_own_files(routed):
    search, _, _, cls_dir, summary = routed
    selection = json.loads((cls_dir / "selection.json").read_text())
    router = selection["router"]
    assert router["spec"]["features"] == ["confidence"] and summary["router"].startswith("LR(confidence")
    for name in ("router.json", "router_calibrators.json", "router_classifier.json", "router.onnx"):
        assert (cls_dir / name).is_file(), name
    record = json.loads((cls_dir / "router.json").read_text())
    assert record["search"] == search and record["onnx_max_abs_diff"] <= 1e-5
    assert (cls_dir / "router_study.db").is_file() == (search == "study")
    if search == "study":
        assert record["study"]["trials"] == 20


def test_the_routing_table_charges_each_router_its_own_stats(routed):
    _, _, _, cls_dir, _ = routed
    routing = json.loads((cls_dir / "routing.json").read_text())
    assert routing["unit"] == "tokens"
    rows = {r["router"]: r for r in routing["rows"]}
    assert rows["Always-RAG"]["tokens"] == pytest.approx(510.0) and rows["Always-RAG"]["lm_calls"] == 1.0
    assert rows["No-RAG"]["tokens"] == pytest.approx(100.0)
    conf, sem, lr = rows["confidence"], rows["semantic_entropy"], rows["LR"]
    assert conf["tokens"] == pytest.approx(100.0 + 510.0 * conf["retrieval_rate"]) and conf["nli_pairs"] == 0.0
    assert sem["tokens"] == pytest.approx(240.0 + 510.0 * sem["retrieval_rate"]) and sem["nli_pairs"] == 20.0
    assert lr["lm_calls"] == pytest.approx(2.0 + lr["retrieval_rate"])
    router = rows["Router"]
    assert router["tokens"] == pytest.approx(100.0 + 510.0 * router["retrieval_rate"])


def test_the_report_answers_which_router_to_ship_with_a_front_plot(routed, tmp_path):
    from workbench.stages.calibrate.report import calibration_lines
    from workbench.stages.classify.report import routing_lines

    _, _, cal_dir, cls_dir, _ = routed
    text = "\n".join(calibration_lines(cal_dir, tmp_path)[0] + routing_lines(cls_dir, tmp_path))
    assert "### Choosing a router: cost against quality" in text and "| **Router** |" in text
    assert "pays for itself" in text and "90% interval" in text
    assert (tmp_path / "router_front.png").stat().st_size > 2000


def test_d2rag_stage_one_reads_the_shipped_router(routed):
    from workbench.bundle.learned import load_learned

    _, _, cal_dir, cls_dir, _ = routed
    learned = load_learned(cal_dir, cls_dir, None)
    assert learned.features == ["confidence"] and learned.tau_rule.startswith("router pick")
    selection = json.loads((cls_dir / "selection.json").read_text())
    assert learned.tau == pytest.approx(selection["router"]["tau"])


def test_the_evaluation_split_follows_the_recipes_split_order_not_the_names():
    from workbench.stages.calibrate.run import evaluation_split

    assert evaluation_split({"calib": 1, "ood": 1, "test": 1}, "calib", ["calib", "test", "ood"]) == "test"
    assert evaluation_split(["calib", "ood"], "calib", ["calib", "test", "ood"]) == "ood"
    assert evaluation_split(["calib", "val", "test"], "calib") == "test"
    assert evaluation_split(["calib"], "calib") == "calib"
