"""The calibrate and classify stages and their report sections on a synthetic collection (no model needed)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from workbench.core.errors import DataError
from workbench.recipe import RecipeConfig
from workbench.stages.calibrate import run as calibrate
from workbench.stages.calibrate.report import calibration_lines
from workbench.stages.classify import run as classify
from workbench.stages.classify.report import routing_lines


def _rows(n: int, seed: int, nan_rows: int = 0) -> list[dict]:
    """Questions whose correctness follows ``good`` (informative), with a noise feature and a few NaNs."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        good = rng.normal()
        correct = float(rng.random() < 1 / (1 + np.exp(-2.5 * good)))
        rag = float(correct or rng.random() < 0.5)
        rows.append(
            {
                "position": i,
                "id": f"q{i}",
                "good": float(good) if i >= nan_rows else float("nan"),
                "noise": float(rng.normal()),
                "correct_em": correct,
                "correct_contains": correct,
                "correct_f1": correct,
                "rag_em": rag,
                "rag_contains": rag,
                "rag_f1": rag,
                "closed_prompt_tokens": 90.0,
                "closed_new_tokens": 10.0,
                "rag_prompt_tokens": 500.0,
                "rag_new_tokens": 10.0,
                "lm_calls": 3.0,
                "prefill_tokens": 200.0,
                "decoded_tokens": 60.0,
                "scored_tokens": 5.0,
                "nli_pairs": 20.0,
                "seconds": 1.0,
            }
        )
    return rows


def _collection(root: Path, calib: list[dict], test: list[dict]) -> Path:
    import datasets

    out = root / "collect"
    out.mkdir(parents=True)
    for split, rows in (("calib", calib), ("test", test)):
        datasets.Dataset.from_list(rows).save_to_disk(str(out / split))
    summary = {"features": ["good", "noise"], "splits": {"calib": {}, "test": {}}}
    (out / "summary.json").write_text(json.dumps(summary))
    return out


def _ctx(tmp_path: Path, name: str, inputs: dict[str, Path], **sections) -> SimpleNamespace:
    config = RecipeConfig(name="t", stages=["build_data"])
    for section, values in sections.items():
        for key, value in values.items():
            setattr(getattr(config, section), key, value)
    out = tmp_path / name
    out.mkdir()
    return SimpleNamespace(config=config, inputs=inputs, out_dir=out, log=logging.getLogger("test"))


@pytest.fixture(scope="module")
def stages_done(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("calib")
    collect_dir = _collection(tmp, _rows(160, 0, nan_rows=3), _rows(100, 1))
    ctx = _ctx(tmp, "calibrate", {"collect": collect_dir})
    cal_summary = calibrate.run(ctx)
    ctx2 = _ctx(
        tmp,
        "classify",
        {"calibrate": ctx.out_dir},
        classify={"seeds": [0, 1], "mlp_max_epochs": 30, "router_search": "none"},
    )
    cls_summary = classify.run(ctx2)
    return tmp, ctx.out_dir, ctx2.out_dir, cal_summary, cls_summary


def test_calibrate_fits_json_calibrators_and_reports_ranking_before_and_after(stages_done):
    from workbench.methods.learned import load_learned

    _, cal_dir, _, summary, _ = stages_done
    meta = json.loads((cal_dir / "summary.json").read_text())
    assert meta["nan"]["bad_values"]["calib"] == {"good": 3}  # counted, imputed with the calib median
    assert summary["best_feature"] == "good" and summary["best_auroc"] > 0.75
    data = json.loads((cal_dir / "calibrated.json").read_text())
    saved = load_learned(cal_dir / "calibrators.json", expect={"calibrator_set"})
    assert saved.features == ("good", "noise") and saved.medians["good"] == meta["nan"]["medians"]["good"]
    assert min(data["calib"]["raw"]["good"]) <= saved.medians["good"] <= max(data["calib"]["raw"]["good"])
    calibrator = saved.calibrators["good"]
    test_raw = np.asarray(data["test"]["raw"]["good"])
    assert np.allclose(calibrator.predict(test_raw), data["test"]["calibrated"]["good"])  # full fit applied to test
    in_sample = calibrator.predict(np.asarray(data["calib"]["raw"]["good"]))
    assert not np.allclose(in_sample, data["calib"]["calibrated"]["good"])  # calib values are out of fold
    metrics = json.loads((cal_dir / "metrics.json").read_text())
    after = metrics["good"]["test"]["after"]
    assert 0.0 <= after["ece"] <= 1.0 and after["auroc"] <= metrics["good"]["test"]["before"]["auroc"] + 1e-9


def test_infinite_values_are_imputed_at_the_end_of_the_fit_range_nan_with_the_median():
    fit = np.array([[1.0, 5.0], [2.0, -np.inf], [3.0, 7.0], [np.nan, 6.0], [4.0, np.inf]])
    test = np.array([[-np.inf, np.nan], [np.inf, 0.5]])
    out, keep, counts = calibrate.apply_nan_policy({"calib": fit, "test": test}, "calib", "impute", ["a", "b"])
    assert counts["ranges"] == {"a": (1.0, 4.0), "b": (5.0, 7.0)} and counts["medians"] == {"a": 2.5, "b": 6.0}
    assert out["calib"][:, 1].tolist() == [5.0, 5.0, 7.0, 6.0, 7.0] and out["calib"][3, 0] == 2.5
    assert out["test"].tolist() == [[1.0, 6.0], [4.0, 0.5]]
    assert counts["bad_values"] == {"calib": {"a": 1, "b": 2}, "test": {"a": 2, "b": 1}} and keep["test"].all()
    dropped, keep, _ = calibrate.apply_nan_policy({"calib": fit}, "calib", "drop", ["a", "b"])
    assert keep["calib"].tolist() == [True, False, True, False, False] and dropped["calib"].shape == (2, 2)


def test_calibrate_saves_the_fit_ranges_inference_imputes_with(stages_done):
    from workbench.methods.learned import load_learned

    _, cal_dir, _, _, _ = stages_done
    data = json.loads((cal_dir / "calibrated.json").read_text())
    saved = load_learned(cal_dir / "calibrators.json", expect={"calibrator_set"})
    raw = data["calib"]["raw"]["noise"]
    assert saved.ranges["noise"] == (min(raw), max(raw))
    assert saved.clean({"good": 0.0, "noise": float("-inf")})[0].tolist() == [0.0, min(raw)]


def test_classify_selects_exports_onnx_and_routes(stages_done):
    _, _, cls_dir, _, summary = stages_done
    assert summary["chosen"] in ("logistic", "mlp") and summary["onnx_max_abs_diff"] <= 1e-5
    assert (cls_dir / "logistic.onnx").is_file() and (cls_dir / "mlp.onnx").is_file()
    assert (cls_dir / "logistic.json").is_file() and (cls_dir / "mlp.json").is_file()
    rows = {r["router"]: r for r in json.loads((cls_dir / "routing.json").read_text())["rows"]}
    assert list(rows)[:3] == ["No-RAG", "Always-RAG", "Oracle"] and {"good", "noise", "LR", "MLP"} <= set(rows)
    assert rows["No-RAG"]["retrieval_rate"] == 0.0 and rows["Always-RAG"]["retrieval_rate"] == 1.0
    assert rows["Oracle"]["contains"] >= max(r["contains"] for r in rows.values()) - 1e-12
    assert rows["Always-RAG"]["tokens"] == pytest.approx(510.0) and rows["No-RAG"]["tokens"] == pytest.approx(100.0)
    lr = rows["LR"]  # feature cost 265 tokens + 510 per retrieved question
    assert lr["tokens"] == pytest.approx(265.0 + 510.0 * lr["retrieval_rate"])
    assert rows["good"]["contains"] > rows["No-RAG"]["contains"]


def test_classify_chooses_tau_out_of_fold_on_rows_that_chose_nothing_else(stages_done, tmp_path):
    # issue 17 item 4: the validation split stops, chooses the model and the seed; τ comes from out-of-fold
    # predictions over the whole fit split, and selection.json says which split chose what
    from workbench.calibration.oof import stratified_folds
    from workbench.classify.select import out_of_fold_proba
    from workbench.classify.threshold import choose_threshold

    _, cal_dir, cls_dir, _, _ = stages_done
    selection = json.loads((cls_dir / "selection.json").read_text())
    assert selection["tau_from"] == "oof" and selection["tau_folds"] == 5
    assert "out-of-fold" in selection["roles"]["tau"] and "validation" in selection["roles"]["model_choice"]
    data = json.loads((cal_dir / "calibrated.json").read_text())
    X = np.asarray([data["calib"]["calibrated"][f] for f in selection["features"]], dtype=float).T
    y = np.asarray(data["calib"]["label"], dtype=float)
    cols = data["calib"]["columns"]
    seed = selection["kinds"]["logistic"]["seed"]
    p = out_of_fold_proba(
        "logistic", X, y, stratified_folds(y, 5, 0), seed=seed, val_fraction=0.3, feature_names=selection["features"]
    )
    rag, closed = np.asarray(cols["rag_contains"], dtype=float), np.asarray(cols["correct_contains"], dtype=float)
    expected = choose_threshold(p, y, rule="max_routed_score", qa_closed=closed, qa_rag=rag)
    assert selection["thresholds"]["LR"]["tau"] == pytest.approx(expected.tau)
    # tau_from: val keeps the earlier behaviour (τ on the validation predictions) and says so
    ctx = _ctx(
        tmp_path,
        "classify_val",
        {"calibrate": cal_dir},
        classify={"seeds": [0], "kinds": ["logistic"], "tau_from": "val", "router_search": "none"},
    )
    classify.run(ctx)
    val_selection = json.loads((ctx.out_dir / "selection.json").read_text())
    assert val_selection["tau_from"] == "val" and val_selection["tau_folds"] is None
    assert val_selection["roles"]["tau"] == val_selection["roles"]["model_choice"]
    text = "\n".join(calibration_lines(cal_dir, tmp_path)[0] + routing_lines(cls_dir, tmp_path))
    assert "| classifier τ | out-of-fold predictions over all" in text


def test_classify_refuses_oof_tau_with_too_few_questions_of_a_class(tmp_path):
    rows = _rows(40, 4)
    for i, row in enumerate(rows):
        row["correct_contains"] = 1.0 if i < 3 else 0.0
    collect_dir = _collection(tmp_path, rows, _rows(20, 5))
    ctx = _ctx(tmp_path, "cal", {"collect": collect_dir}, calibrate={"folds": 2})
    calibrate.run(ctx)
    with pytest.raises(DataError, match="tau_folds=5"):
        classify.run(
            _ctx(tmp_path, "cls", {"calibrate": ctx.out_dir}, classify={"seeds": [0], "router_search": "none"})
        )


def test_report_sections_show_the_routing_table_and_plots(stages_done, tmp_path):
    _, cal_dir, cls_dir, _, _ = stages_done
    lines = calibration_lines(cal_dir, tmp_path)[0] + routing_lines(cls_dir, tmp_path)
    text = "\n".join(lines)
    assert "| **LR** |" in text and "| Oracle |" in text and "AUROC before → after" in text
    for png in ("reliability.png", "roc.png", "rejection.png", "lr_weights.png", "feature_correlation.png"):
        assert (tmp_path / png).stat().st_size > 2000, png


def test_bad_collections_get_one_line_errors(tmp_path):
    one_class = _rows(40, 2)
    for row in one_class:
        row["correct_contains"] = 0.0
    collect_dir = _collection(tmp_path, one_class, _rows(20, 3))
    with pytest.raises(DataError, match="one class only"):
        calibrate.run(_ctx(tmp_path, "c1", {"collect": collect_dir}))
    with pytest.raises(DataError, match="no feature column"):
        calibrate.run(_ctx(tmp_path, "c2", {"collect": collect_dir}, calibrate={"features": ["good", "missing"]}))
    with pytest.raises(DataError, match="label column"):
        calibrate.run(_ctx(tmp_path, "c3", {"collect": collect_dir}, calibrate={"label": "nope"}))


def test_paired_bootstrap_separates_a_perfect_scorer_from_noise_and_ties_from_itself():
    from workbench.stages.classify.report import paired_bootstrap

    rng = np.random.default_rng(0)
    labels = np.array([0, 1] * 30, dtype=float)
    perfect = labels + 0.01 * rng.random(labels.size)
    noise = rng.random(labels.size)
    scores = {"perfect": list(perfect), "noise": list(noise), "same": list(noise)}
    out = paired_bootstrap(scores, labels, "noise", draws=300)
    assert out["perfect"]["auroc"][0] > 0.99 and out["perfect"]["d_auroc"][0] > 0.2  # interval excludes 0
    assert out["perfect"]["d_prr"][0] > 0.2
    assert out["same"]["d_auroc"] == (0.0, 0.0) and out["same"]["d_prr"] == (0.0, 0.0)
    assert out["noise"]["auroc"][0] < 0.5 < out["noise"]["auroc"][1]


def test_paired_bootstrap_gives_nan_without_both_classes():
    from workbench.stages.classify.report import paired_bootstrap

    labels = np.ones(40)
    out = paired_bootstrap({"a": list(np.linspace(0, 1, 40))}, labels, "a", draws=50)
    assert all(np.isnan(v) for v in out["a"]["auroc"])
