"""The transfer stage's measurements on synthetic rows (no model): per-feature AUROC / ECE, the decision's figures,
routing against the fixed policies, the OOD flag's false-positive and detection rates, the shift, and the report
section built from them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.calibration.calibrator_set import CalibratorSet
from workbench.calibration.platt import PlattCalibrator
from workbench.metrics.ranking import auroc
from workbench.stages.transfer.report import transfer_section
from workbench.stages.transfer.run import measure, shift, template_of


class _Policy:
    """A stand-in decision: P(correct) = σ(good), retrieve iff P < τ."""

    features = ("good",)
    tau = 0.5

    def p_correct(self, rows):
        return np.asarray([1.0 / (1.0 + np.exp(-r["good"])) for r in rows])


def _rows(n: int, seed: int, signal: float, template: str) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        good = float(rng.normal())
        correct = float(rng.random() < 1.0 / (1.0 + np.exp(-signal * good)))
        rows.append(
            {
                "id": f"{seed}-{i}",
                "question": f"Question {i}?",
                "template": template if i % 3 else f"{template}_b",
                "good": good,
                "noise": float(rng.normal()) if i % 10 else float("nan"),
                "correct_contains": correct,
                "rag_contains": float(correct or rng.random() < 0.6),
            }
        )
    return rows


def _calibrators() -> CalibratorSet:
    fit = _rows(300, 0, 3.0, "fit")
    y = [r["correct_contains"] for r in fit]
    calibrators = {
        name: PlattCalibrator().fit([r[name] if np.isfinite(r[name]) else 0.0 for r in fit], y)
        for name in ("good", "noise")
    }
    return CalibratorSet(("good", "noise"), calibrators, {"good": 0.0, "noise": 0.0}, {})


def _measure(rows: list[dict], draws: int = 200, ood_checks: list | None = None) -> dict:
    labels = np.asarray([r["correct_contains"] for r in rows])
    return measure(
        rows,
        labels=labels,
        calibrators=_calibrators(),
        policy=_Policy(),
        routed_score="contains",
        ood_checks=ood_checks,
        draws=draws,
    )


def test_measure_reports_features_decision_and_routing():
    rows = _rows(200, 1, 3.0, "choice")
    out = _measure(rows)
    y = np.asarray([r["correct_contains"] for r in rows])
    assert out["rows"] == 200 and out["templates"] == {"choice": 133, "choice_b": 67}
    assert out["features"]["good"]["auroc"] == pytest.approx(auroc([r["good"] for r in rows], y))
    assert out["features"]["good"]["auroc"] > 0.75 and abs(out["features"]["noise"]["auroc"] - 0.5) < 0.15
    assert out["features"]["noise"]["non_finite"] == 20 and out["features"]["good"]["ece"] < 0.15
    p = _Policy().p_correct(rows)
    retrieve = p < 0.5
    closed, rag = y, np.asarray([r["rag_contains"] for r in rows])
    routing = out["routing"]
    assert routing["routed"] == pytest.approx(np.where(retrieve, rag, closed).mean())
    assert routing["retrieval_rate"] == pytest.approx(retrieve.mean())
    assert routing["no_rag"] == pytest.approx(closed.mean()) and routing["always_rag"] == pytest.approx(rag.mean())
    assert routing["oracle"] >= max(routing["routed"], routing["always_rag"])
    low, high = out["intervals"]["decision_auroc"]
    assert low <= out["decision"]["auroc"] <= high
    low, high = out["intervals"]["routed"]
    assert low <= routing["routed"] <= high
    assert set(out["by_template"]) == {"choice", "choice_b"}
    assert sum(t["rows"] for t in out["by_template"].values()) == 200
    assert out["ood"] is None  # no profile given


def test_the_ood_flag_is_counted_with_a_wilson_interval_per_condition():
    """In distribution the flag's rate is its false-positive rate, shifted its detection rate; Δ is theirs."""
    in_rows, shifted_rows = _rows(100, 7, 3.0, "choice"), _rows(50, 8, 0.5, "cloze")
    in_checks = [["question_embedding"] if i < 5 else [] for i in range(100)]
    shifted_checks = [["question_embedding", "question_form"] if i % 5 else ["question_form"] for i in range(50)]
    in_dist, shifted = _measure(in_rows, ood_checks=in_checks), _measure(shifted_rows, ood_checks=shifted_checks)
    assert in_dist["ood"]["flagged"] == 5 and in_dist["ood"]["rate"] == 0.05
    low, high = in_dist["ood"]["interval"]
    assert 0.01 < low < 0.05 < high < 0.11  # the 90 % Wilson interval of 5 / 100
    assert shifted["ood"]["rate"] == 1.0 and shifted["ood"]["interval"][1] == 1.0
    assert shifted["ood"]["checks"] == {"question_embedding": 40, "question_form": 50, "question_length": 0}
    assert shift(in_dist, shifted)["ood_flag_rate"] == pytest.approx(0.95)
    with pytest.raises(Exception, match="OOD checks"):
        _measure(in_rows, ood_checks=in_checks[:10])


def test_a_weaker_signal_shows_as_a_negative_shift():
    in_dist, shifted = _measure(_rows(300, 2, 4.0, "choice")), _measure(_rows(300, 3, 0.3, "cloze"))
    delta = shift(in_dist, shifted)
    assert delta["decision_auroc"] < -0.1 and delta["features"]["good"]["auroc"] < -0.1
    assert delta["decision_ece"] == pytest.approx(shifted["decision"]["ece"] - in_dist["decision"]["ece"])


def test_one_class_labels_give_no_auroc_and_no_interval():
    rows = _rows(40, 4, 3.0, "cloze")
    for row in rows:
        row["correct_contains"] = 0.0
    out = _measure(rows, draws=20)
    assert out["decision"]["auroc"] is None and out["intervals"]["decision_auroc"] == [None, None]
    assert out["routing"]["no_rag"] == 0.0 and out["decision"]["ece"] is not None


def test_template_of_reads_the_metadata():
    assert template_of({"metadata": json.dumps({"template": "cloze"})}) == "cloze"
    assert template_of({"metadata": "not json"}) == "?" and template_of({}) == "?"


def test_the_report_section_renders(tmp_path):
    in_checks = [[] if i % 20 else ["question_embedding"] for i in range(120)]
    in_dist = _measure(_rows(120, 5, 3.0, "choice"), ood_checks=in_checks)
    shifted = _measure(_rows(60, 6, 0.5, "cloze"), ood_checks=[["question_form"]] * 60)
    record = {
        "split": "test",
        "in_templates": ["choice"],
        "shifted_templates": ["cloze"],
        "label": "correct_contains",
        "label_threshold": 0.5,
        "routed_score": "contains",
        "bootstrap": {"draws": 200, "level": 0.9},
        "decision": {"kind": "router", "name": "LR(good; platt)", "features": ["good"], "tau": 0.5, "rule": "x"},
        "ood": {"target_fpr": 0.05, "split": "val", "questions": 900, "flag_rate": 0.049, "rule_rate": 0.0},
        "conditions": {"in_distribution": in_dist, "shifted": shifted},
        "shift": shift(in_dist, shifted),
    }
    (tmp_path / "transfer.json").write_text(json.dumps(record))
    lines = transfer_section(tmp_path, tmp_path / "report")
    text = "\n".join(lines)
    assert lines[0] == "## Calibration transfer" and "router `LR(good; platt)`" in text
    assert "| decision AUROC |" in text and "| routed − Always-RAG |" in text and "| good |" in text
    assert "| shifted | cloze |" in text and (tmp_path / "report" / "transfer.png").is_file()
    assert "| OOD flag rate (in: false positives; shifted: detected) | 5.0 % [" in text and "| 100.0 % [" in text
    assert "set for 5 % false positives on 900 `val` questions" in text
    assert "it flags 6 of 120 (5.0 % [" in text and "and 60 of 60 (100.0 % [" in text
    assert "shifted `question_form` 60" in text
