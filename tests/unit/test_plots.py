"""Tests for the report plots in workbench.plots: each writes a real PNG; the ROC helper matches AUROC."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.plot_capture import error_bars
from workbench.metrics.ranking import auroc
from workbench.plots import (
    grouped_bars,
    heatmap,
    horizontal_bars,
    rejection_curves,
    reliability_grid,
    roc_curves,
    roc_points,
    unit_panels,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _legend(ax) -> list[str]:
    return [text.get_text() for text in ax.get_legend().get_texts()]


def _curves(ax) -> list[str]:
    """Labels of the lines that hold data (the chance diagonal included)."""
    return [line.get_label() for line in ax.get_lines() if len(line.get_xdata())]


def _assert_png(path: Path) -> None:
    assert path.is_file()
    assert path.stat().st_size > 2000
    assert path.read_bytes()[:8] == PNG_MAGIC


# ---- roc_points -------------------------------------------------------------------------------------------------


def test_roc_points_hand_computed_with_tie_and_nan():
    # sorted descending: 0.9 (pos) | 0.8 (pos), 0.8 (neg) tie | 0.3 (neg) | 0.1 (pos); the NaN pair is dropped
    scores = [0.8, 0.1, 0.9, 0.3, 0.8, np.nan]
    labels = [0, 1, 1, 0, 1, 1]
    fpr, tpr = roc_points(scores, labels)
    np.testing.assert_allclose(fpr, [0.0, 0.0, 0.5, 1.0, 1.0])
    np.testing.assert_allclose(tpr, [0.0, 1 / 3, 2 / 3, 2 / 3, 1.0])
    assert np.trapezoid(tpr, fpr) == pytest.approx(7 / 12)
    assert auroc(scores, labels) == pytest.approx(7 / 12)


def test_roc_points_all_tied_is_the_diagonal():
    fpr, tpr = roc_points([0.5, 0.5, 0.5, 0.5], [1, 0, 1, 0])
    np.testing.assert_allclose(fpr, [0.0, 1.0])
    np.testing.assert_allclose(tpr, [0.0, 1.0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_roc_points_area_equals_auroc_on_random_data(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=300).astype(float)
    scores = np.round(labels * 0.5 + rng.normal(size=300), 1)  # rounding creates many ties
    scores[rng.choice(300, size=10, replace=False)] = np.nan
    fpr, tpr = roc_points(scores, labels)
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
    assert np.trapezoid(tpr, fpr) == pytest.approx(auroc(scores, labels), abs=1e-12)


def test_roc_points_rejects_one_class_and_unequal_lengths():
    with pytest.raises(ValueError, match="both classes"):
        roc_points([0.1, 0.2], [1, 1])
    with pytest.raises(ValueError, match="both classes"):
        roc_points([np.nan, np.nan], [0, 1])
    with pytest.raises(ValueError, match="equal length"):
        roc_points([0.1, 0.2, 0.3], [0, 1])


# ---- figures ----------------------------------------------------------------------------------------------------


def test_reliability_grid_writes_png_with_wrapping_and_constant_predictions(tmp_path):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, size=80).astype(float)
    before = np.clip(labels * 0.3 + rng.uniform(0.2, 0.7, size=80), 0, 1)
    after = np.clip(labels * 0.6 + rng.uniform(0.0, 0.4, size=80), 0, 1)
    panels = {f"method {i}": (before, after, labels) for i in range(5)}  # 5 panels: wraps to 2 rows
    panels["all equal"] = (np.full(80, 0.5), np.full(80, 0.5), labels)
    out = reliability_grid(tmp_path / "sub" / "rel.png", panels, n_bins=5, title="reliability")
    assert out == tmp_path / "sub" / "rel.png"
    _assert_png(out)


def test_reliability_grid_single_panel(tmp_path):
    out = reliability_grid(tmp_path / "one.png", {"a": ([0.1, 0.9, 0.4], [0.2, 0.8, 0.5], [0, 1, 1])}, title="t")
    _assert_png(out)


def test_roc_curves_skips_undefined_series(tmp_path, drawn):
    labels = [0, 1, 1, 0, 1, 0, 1, 1]
    curves = {
        "good": [0.1, 0.9, 0.8, 0.2, 0.7, 0.3, np.nan, 0.6],
        "all nan": [np.nan] * 8,
        "one class left": [np.nan, 0.5, 0.4, np.nan, 0.3, np.nan, 0.2, 0.1],
    }
    _assert_png(roc_curves(tmp_path / "roc.png", curves, labels, title="ROC"))
    (ax,) = drawn
    legend = _legend(ax)
    assert legend[0] == "chance" and legend[1].startswith("good (AUROC ")
    assert legend[2:] == ["all nan (undefined)", "one class left (undefined)"]
    assert _curves(ax) == ["chance", legend[1]]  # the undefined series are listed, not drawn


def test_roc_curves_one_class_labels(tmp_path, drawn):
    _assert_png(roc_curves(tmp_path / "roc1.png", {"s": [0.1, 0.2, 0.3]}, [1, 1, 1], title="ROC"))
    (ax,) = drawn
    assert _legend(ax) == ["chance", "s (undefined)"] and _curves(ax) == ["chance"]


def test_rejection_curves_writes_png(tmp_path):
    rng = np.random.default_rng(1)
    quality = rng.uniform(size=50)
    curves = {"good": quality + rng.normal(scale=0.2, size=50), "noise": rng.normal(size=50), "nan": [np.nan] * 50}
    _assert_png(rejection_curves(tmp_path / "rej.png", curves, quality, title="rejection"))


def test_heatmap_with_nan_cell(tmp_path, drawn):
    m = np.array([[1.0, 0.35, -0.8], [0.35, 1.0, np.nan], [-0.8, np.nan, 1.0]])
    _assert_png(heatmap(tmp_path / "heat.png", m, ["alpha", "beta", "gamma"], title="Spearman"))
    (ax,) = drawn
    cells = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in ax.texts}
    assert (1, 2) not in cells and (2, 1) not in cells  # the NaN cells are left blank
    assert cells == {(i, j): f"{m[i, j]:.2f}" for i in range(3) for j in range(3) if not np.isnan(m[i, j])}
    shown = ax.get_images()[0].get_array()
    assert shown.mask.tolist() == np.isnan(m).tolist()  # drawn masked (grey), not as a colour of the scale


def test_heatmap_rejects_bad_shapes(tmp_path):
    with pytest.raises(ValueError, match="square"):
        heatmap(tmp_path / "h.png", np.zeros((2, 3)), ["a", "b"], title="t")
    with pytest.raises(ValueError, match="labels"):
        heatmap(tmp_path / "h.png", np.zeros((2, 2)), ["a"], title="t")


@pytest.mark.parametrize("signed", [True, False])
def test_horizontal_bars_writes_png(tmp_path, signed):
    weights = {"bias": 0.4, "entropy": -1.25, "length": 0.02, "nli": 2.1, "degree": -0.3}
    _assert_png(horizontal_bars(tmp_path / f"bars_{signed}.png", weights, title="LR", xlabel="weight", signed=signed))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda p: reliability_grid(p, {}, title="t"), "reliability_grid: no panels"),
        (lambda p: roc_curves(p, {}, [0, 1], title="t"), "roc_curves: no curves"),
        (lambda p: rejection_curves(p, {}, [0.1, 0.2], title="t"), "rejection_curves: no curves"),
        (lambda p: heatmap(p, np.zeros((0, 0)), [], title="t"), "heatmap: empty matrix"),
        (lambda p: horizontal_bars(p, {}, title="t", xlabel="x"), "horizontal_bars: no values"),
    ],
)
def test_empty_input_raises(tmp_path, call, match):
    path = tmp_path / "empty.png"
    with pytest.raises(ValueError, match=match):
        call(path)
    assert not path.exists()


# ---- intervals, printed values, titles ----------------------------------------------------------------------------


def _printed(ax) -> dict[str, float]:
    """Each printed value and the height it is printed at."""
    return {text.get_text(): text.xy[1] for text in ax.texts}


def test_grouped_bars_draw_each_interval_and_print_the_value_above_it(tmp_path, drawn):
    _assert_png(
        grouped_bars(
            tmp_path / "g.png",
            ["a", "b", "c"],
            {"closed-book": [0.5, 0.7, np.nan], "RAG": [0.25, 0.9, 1.0]},
            title="t",
            ylabel="accuracy",
            intervals={"closed-book": [(0.4, 0.6), None, (0.1, 0.9)], "RAG": [None, None, (0.7, 1.0)]},
            reference=(0.5, "chance"),
        )
    )
    (ax,) = drawn
    bars = sorted(error_bars(ax))
    assert [(round(x, 2), lo, hi) for x, lo, hi in bars] == [(-0.2, 0.4, 0.6), (2.2, 0.7, 1.0)]  # c's NaN: no bar
    printed = _printed(ax)
    assert printed == {"0.50": 0.6, "0.70": 0.7, "0.25": 0.25, "0.90": 0.9, "1.00": 1.0}  # above the interval's top
    assert ax.get_ylim()[1] > 1.0 and max(ax.get_yticks()) <= 1.0  # room for a value printed over a full bar
    assert _legend(ax) == ["chance", "closed-book", "RAG"]
    box, legend = ax.get_window_extent(), ax.get_legend().get_window_extent()
    assert legend.x0 >= box.x1  # the legend sits right of the axes, over no bar


def test_counts_print_as_whole_numbers_and_rates_with_decimals():
    from workbench.plots.bars import value_format

    assert value_format([4.0, 0.0, 6.0]) == "{:.0f}"
    assert value_format([1.0, 0.0, 1.0]) == "{:.2f}"  # rates of exactly 1 and 0 are still rates
    assert value_format([0.5, 6.0, np.nan]) == "{:.2f}"


def _title_fits(fig, text) -> bool:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    box = text.get_window_extent(FigureCanvasAgg(fig).get_renderer())  # the saved figure, drawn again
    return fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1


@pytest.fixture
def figures(monkeypatch):
    """The figures the plots module saves, after they are finished."""
    import workbench.plots.figure as figure

    saved = []
    original = figure.finish

    def capture(plt, fig, ax_list, path):
        out = original(plt, fig, ax_list, path)
        saved.append(fig)
        return out

    monkeypatch.setattr(figure, "finish", capture)
    return saved


def test_a_long_title_is_wrapped_inside_the_figure_not_cut(tmp_path, figures):
    title = "Logistic regression weights (standardised calibrated features) of the shipped router"
    weights = {"matrix_degree_uncertainty": -0.247, "eccentricity_uncertainty": 0.25, "(intercept)": 1.17}
    horizontal_bars(tmp_path / "w.png", weights, title=title, xlabel="weight")
    horizontal_bars(tmp_path / "short.png", weights, title="LR weights", xlabel="weight")
    (long_fig, short_fig) = figures
    wrapped = long_fig.axes[0].title
    assert "\n" in wrapped.get_text() and " ".join(wrapped.get_text().split()) == title  # every word kept
    assert _title_fits(long_fig, wrapped)
    assert short_fig.axes[0].title.get_text() == "LR weights"


def test_a_long_figure_title_is_wrapped_too(tmp_path, figures):
    panels = {"LM calls": ([1.0, 23.0], "calls"), "seconds": ([0.2, 9.7], "s")}
    unit_panels(tmp_path / "u.png", ["no_rag", "insemrag"], panels, title="Cost per question " * 12)
    (fig,) = figures
    (suptitle,) = fig.texts
    assert "\n" in suptitle.get_text() and _title_fits(fig, suptitle)
    assert [t.get_text() for t in fig.axes[0].texts] == ["1", "23"]  # LM calls are whole numbers


def test_transfer_panels_draw_the_decision_interval(tmp_path, drawn):
    from workbench.plots import transfer_panels

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, size=40).astype(float)
    probs = np.clip(labels * 0.4 + rng.uniform(0.1, 0.5, size=40), 0, 1)
    transfer_panels(
        tmp_path / "t.png",
        ["entropy", "decision"],
        {"in distribution": [0.7, 0.75], "shifted": [0.6, None]},
        {"in distribution": (probs, labels)},
        title="transfer",
        intervals={"in distribution": [None, (0.6, 0.85)], "shifted": [None, None]},
    )
    left = drawn[0]
    assert [(round(x, 1), lo, hi) for x, lo, hi in error_bars(left)] == [(0.8, 0.6, 0.85)]


def test_curve_legends_sit_below_the_axes_off_the_curves(tmp_path, drawn):
    labels = [0, 1, 1, 0, 1, 0, 1, 1]
    scores = {"semantic_entropy (best feature)": [0.1, 0.9, 0.8, 0.2, 0.7, 0.3, 0.4, 0.6], "LR": [0.5] * 8}
    roc_curves(tmp_path / "roc.png", scores, labels, title="ROC")
    rejection_curves(tmp_path / "rej.png", scores, labels, title="rejection")
    for ax in drawn:
        assert ax.get_legend().get_window_extent().y1 <= ax.get_window_extent().y0
