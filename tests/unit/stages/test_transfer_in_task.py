"""The transfer stage's in-task vs transferred router table (workbench/stages/transfer/in_task.py) on hand-made
numbers, and its report lines."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.metrics.bootstrap import mean_intervals
from workbench.stages.classify.settings import ClassifySection
from workbench.stages.transfer.in_task import (
    classifier_settings,
    compare_routers,
    cross_fitted_retrieve,
    in_task_routers,
    threshold_chooser,
)
from workbench.stages.transfer.report import router_lines


def _mean_of_others(p: np.ndarray, y: np.ndarray, idx: np.ndarray) -> float:
    """A τ rule that reads the labels: the mean score of the rows labelled wrong (0)."""
    return float(p[y < 0.5].mean())


def test_each_fold_is_decided_by_a_tau_chosen_on_the_other_folds():
    scores = np.array([0.1, 0.9, 0.4, 0.6, 0.3, 0.8])
    labels = np.array([0.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    folds = np.array([0, 0, 1, 1, 2, 2])
    retrieve = cross_fitted_retrieve(scores, labels, folds, _mean_of_others)
    # fold 0: τ = mean(0.4, 0.3) = 0.35 → 0.1 retrieves, 0.9 not; fold 1: τ = mean(0.1, 0.3) = 0.2 → neither;
    # fold 2: τ = mean(0.1, 0.4) = 0.25 → neither
    assert retrieve.tolist() == [True, False, False, False, False, False]
    flipped = labels.copy()
    flipped[0] = 1.0  # row 0's own label never sets the τ that decides it
    assert cross_fitted_retrieve(scores, flipped, folds, _mean_of_others)[:2].tolist() == [True, False]


def test_compare_routers_gives_both_sides_and_a_paired_interval_of_the_difference():
    closed = np.array([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    rag = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    wrong = closed < 0.5
    in_task = {"entropy": wrong.copy(), "LR": np.ones(8, dtype=bool)}  # in-task entropy is the oracle here
    transferred = {"entropy": np.zeros(8, dtype=bool)}  # the transferred one never retrieves
    rows = compare_routers(in_task, transferred, closed, rag, draws=300, seed=1)
    by_name = {row["router"]: row for row in rows}
    assert [row["router"] for row in rows] == ["No-RAG", "Always-RAG", "Oracle", "entropy", "LR"]
    entropy = by_name["entropy"]
    assert entropy["in_task"] == {"decision_accuracy": 1.0, "routed": 0.875, "retrieval_rate": 0.625}
    assert entropy["transferred"] == {"decision_accuracy": 0.375, "routed": 0.375, "retrieval_rate": 0.0}
    assert entropy["difference"] == pytest.approx({"decision_accuracy": 0.625, "routed": 0.5})
    decided = (in_task["entropy"] == wrong).astype(float) - (transferred["entropy"] == wrong).astype(float)
    routed = np.where(in_task["entropy"], rag, closed) - closed
    expected = mean_intervals(np.stack([decided, routed]), n_resamples=300, seed=1)
    assert entropy["intervals"] == {"decision_accuracy": expected[0].as_bounds(), "routed": expected[1].as_bounds()}
    assert entropy["intervals"]["routed"][0] <= 0.5 <= entropy["intervals"]["routed"][1]
    # a router the run lacks: in-task figures only
    assert by_name["LR"]["transferred"] is None and "difference" not in by_name["LR"]
    assert by_name["Oracle"]["in_task"]["decision_accuracy"] == 1.0 and by_name["No-RAG"]["in_task"]["routed"] == 0.375


def test_in_task_routers_fit_every_kind_and_the_grid_cross_fitted():
    rng = np.random.default_rng(0)
    n = 40
    labels = (np.arange(n) % 2).astype(float)
    signal = np.clip(0.5 + 0.35 * (2 * labels - 1) + rng.normal(0, 0.15, n), 0, 1)  # ranks the label well
    noise = rng.uniform(0, 1, n)
    X = np.stack([signal, noise], axis=1)
    section = ClassifySection()
    closed, rag = labels.copy(), np.ones(n)
    folds = np.arange(n) % 4
    routers, unfit = in_task_routers(
        X,
        labels,
        ["signal", "noise"],
        kinds=["logistic", "knn"],
        grid_kinds=["tree"],
        folds=folds,
        choose=threshold_chooser(section, closed, rag),
        seed=0,
        val_fraction=section.val_fraction,
        settings=classifier_settings(section),
    )
    assert list(routers) == ["signal", "noise", "LR", "kNN", "Tree(signal)", "Tree(noise)"] and unfit == {}
    wrong = labels < 0.5
    accuracy = {name: float((mask == wrong).mean()) for name, mask in routers.items()}
    assert accuracy["signal"] > 0.85 and accuracy["LR"] > 0.85 and accuracy["Tree(signal)"] > 0.85
    assert accuracy["Tree(noise)"] < accuracy["Tree(signal)"]


def _record(skipped: str | None, rows: list[dict]) -> dict:
    return {
        "shifted_templates": ["cloze", "two_hop"],
        "in_templates": ["choice_cloze"],
        "routed_score": "contains",
        "bootstrap": {"level": 0.9, "draws": 300},
        "conditions": {"shifted": {"rows": 8}},
        "routers": {"folds": 4, "seed": 0, "rows": rows, "skipped": skipped},
    }


def test_the_router_lines_show_each_side_and_the_difference_or_why_there_are_none():
    closed = np.array([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    rows = compare_routers(
        {"entropy": closed < 0.5}, {"entropy": np.zeros(8, dtype=bool)}, closed, np.ones(8), draws=200, seed=0
    )
    text = "\n".join(router_lines(_record(None, rows)))
    assert "### Routers on cloze, two_hop questions: fitted in-task vs transferred" in text
    entropy = next(line for line in text.splitlines() if line.startswith("| entropy |"))
    assert "| 1.000 | 0.375 | +0.625 [" in entropy
    assert next(line for line in text.splitlines() if line.startswith("| Oracle |")).count("|  |") == 2
    skipped = router_lines(_record("the shifted questions hold 0 of their rarer class", []))
    assert "No in-task routers: the shifted questions hold 0 of their rarer class." in skipped
    assert router_lines({"shifted_templates": []}) == []


def test_a_classifier_a_fold_cannot_fit_is_left_out_and_said_why():
    labels = np.array([1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    X = np.array([[0.9], [0.8], [0.2], [0.3], [0.1], [0.4]])
    folds = np.array([0, 0, 1, 1, 2, 2])  # fold 0 held out: its training part holds one class only
    routers, unfit = in_task_routers(
        X,
        labels,
        ["confidence"],
        kinds=["logistic"],
        grid_kinds=["tree"],
        folds=folds,
        choose=_mean_of_others,
        seed=0,
        val_fraction=0.2,
        settings=classifier_settings(ClassifySection()),
    )
    assert list(routers) == ["confidence"] and set(unfit) == {"LR", "Tree(confidence)"}
    assert all(why and "\n" not in why for why in unfit.values())
    record = _record(None, compare_routers(routers, {}, labels, np.ones(6), draws=50, seed=0))
    record["routers"]["unfit"] = unfit
    assert any(line.startswith("Not fitted in-task: LR (") for line in router_lines(record))
