"""The τ sweep: every distinct retrieval set with its routed score, rate and intervals; its plot and the router
front's, whose every name is in the legend."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.test_plots import _assert_png, _legend
from workbench.routing.sweep import row_at, sweep_rows

P = [0.9, 0.2, 0.6, 0.4, 0.8, 0.1]
CLOSED = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0]  # the last question is right closed-book and hurt by retrieval
RAG = [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]


def test_each_row_is_one_retrieval_set_scored_by_hand():
    rows = sweep_rows(P, CLOSED, RAG, cost=lambda tau, rate: 100.0 + 500.0 * rate, draws=300)
    assert [r["retrieved"] for r in rows] == [0, 1, 2, 3, 4, 5, 6] and rows[-1]["tau"] > 1.0
    by_count = {r["retrieved"]: r for r in rows}
    # τ between 0.2 and 0.4 retrieves for p = 0.1 and 0.2: question 5 loses its right answer, question 1 gains one
    two = by_count[2]
    assert 0.2 < two["tau"] < 0.4 and two["quality"] == pytest.approx(4 / 6)
    assert two["difference"] == pytest.approx(4 / 6 - 4 / 6) and two["cost"] == pytest.approx(100 + 500 * 2 / 6)
    # the same questions for every τ above 0.2 up to 0.4: the set changes at P(correct) values, not at midpoints
    assert (
        two["tau_range"] == [0.2, 0.4] and rows[0]["tau_range"] == [0.0, 0.1] and rows[-1]["tau_range"] == [0.9, None]
    )
    assert by_count[0]["quality"] == pytest.approx(4 / 6) and by_count[6]["difference"] == 0.0
    for row in rows:
        lo, hi = row["quality_interval"]
        assert lo <= row["quality"] <= hi
        r_lo, r_hi = row["rate_interval"]
        assert r_lo <= row["retrieval_rate"] <= r_hi and r_lo >= 0.0 and r_hi <= 1.0
    assert by_count[6]["difference_interval"] == [0.0, 0.0]  # Always-RAG against itself: no spread


def test_the_intervals_are_the_metrics_helpers_own():
    from workbench.metrics.bootstrap import mean_interval
    from workbench.metrics.proportion import wilson_interval

    rng = np.random.default_rng(3)
    p, closed, rag = rng.random(80), (rng.random(80) < 0.6).astype(float), (rng.random(80) < 0.8).astype(float)
    rows = sweep_rows(p, closed, rag, draws=500, seed=4)
    row = rows[40]
    routed = np.where(p < row["tau"], rag, closed)
    assert row["quality_interval"] == pytest.approx(list(mean_interval(routed, n_resamples=500, seed=4).as_tuple()))
    paired = mean_interval(routed - rag, n_resamples=500, seed=4).as_tuple()
    assert row["difference_interval"] == pytest.approx(list(paired))
    assert row["rate_interval"] == pytest.approx(list(wilson_interval(row["retrieved"], 80)))
    assert row_at(rows, p, row["tau"]) is row and row_at(rows, p, 2.0) is rows[-1]
    assert rows[0]["cost"] is None  # no cost function: no cost


def test_a_sweep_needs_equal_lengths_and_gives_no_interval_for_one_question():
    with pytest.raises(ValueError, match="predictions"):
        sweep_rows([0.5, 0.2], [1.0], [1.0, 0.0])
    (never, always) = sweep_rows([0.5], [1.0], [0.0], draws=100)
    assert never["quality"] == 1.0 and never["quality_interval"] is None and always["quality"] == 0.0


def test_the_tau_sweep_plot_marks_the_operating_points(tmp_path, drawn):
    from workbench.plots import tau_sweep_plot

    rows = sweep_rows(P, CLOSED, RAG, draws=200)
    path = tau_sweep_plot(
        tmp_path / "tau_sweep.png",
        rows,
        marks={"shipped": 0.5, "classify's pick": rows[-1]["tau"]},
        references={"Always-RAG": 4 / 6, "No-RAG": 4 / 6},
        title="τ sweep",
        score="routed containment",
    )
    _assert_png(path)
    top, bottom = drawn
    labels = _legend(bottom)
    assert "shipped: τ = 0.500" in labels and "classify's pick: τ > 1 (always)" in labels
    assert "Always-RAG 0.667" in labels and "routed containment: 90% interval" in labels
    assert [round(x, 3) for x in top.get_lines()[-2].get_xdata()] == [0.5, 0.5]  # the shipped τ's line
    with pytest.raises(ValueError, match="no rows"):
        tau_sweep_plot(tmp_path / "x.png", [], marks={}, references={}, title="t", score="s")


def test_the_router_front_names_every_router_and_reference_in_its_legend(tmp_path, drawn):
    from workbench.plots import cost_quality_front
    from workbench.plots.scatter import front_series

    def point(name, quality, scalar, tau=0.5, kind="single"):
        return {"name": name, "quality": quality, "scalar": scalar, "tau": tau, "kind": kind, "rate": 0.5}

    points = [point(f"LR(f{i})", 0.8 + i / 100, 200 + i) for i in range(10)] + [point("LR(f3)", 0.9, 150)]
    points.append(point("cascade[x]", 0.95, 120, kind="cascade"))
    references = [  # Always-RAG and Oracle at the same score, 47 tokens apart: the quickstart's overprinted pair
        {"name": "No-RAG", "quality": 0.75, "scalar": 99.0},
        {"name": "Always-RAG", "quality": 0.969, "scalar": 202.0},
        {"name": "Oracle", "quality": 0.969, "scalar": 149.0},
    ]
    picked = {**points[3], "tau": 1.0 + 1e-9}
    path = cost_quality_front(
        tmp_path / "front.png", points, points[:2], references, picked, title="t", xlabel="x", ylabel="y"
    )
    _assert_png(path)
    (ax,) = drawn
    labels = _legend(ax)
    assert not ax.texts  # nothing written on the plane: no two labels can overprint
    assert {"Always-RAG: 0.969 at 202", "Oracle: 0.969 at 149", "No-RAG: 0.750 at 99"} <= set(labels)
    assert "picked: LR(f3) (τ > 1, always retrieves)" in labels and "other routers (2)" in labels
    series = front_series(points, picked, max_routers=8)
    assert series[0][0] == "LR(f3)" and len(series[0][1]) == 2  # the picked router first, with all its points
    assert [name for name, _ in series][1:8] == ["LR(f0)", "LR(f1)", "LR(f2)", "LR(f4)", "LR(f5)", "LR(f6)", "LR(f7)"]
