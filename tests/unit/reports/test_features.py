"""The collect report section: AUROC per feature, bootstrap intervals only where both classes are frequent enough."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.reports.auroc import MIN_PER_CLASS
from workbench.stages.collect.report import feature_section


def write_collect(folder, positives: int, n: int = 40) -> None:
    """A collect output with one informative feature (``good``) and ``positives`` correct answers per split."""
    import datasets

    rng = np.random.default_rng(0)
    labels = [1.0] * positives + [0.0] * (n - positives)
    good = [y + 0.5 * rng.standard_normal() for y in labels]
    rows = {
        "good": good,
        "correct_contains": labels,
        "lm_calls": [1.0] * n,
        "prefill_tokens": [90.0] * n,
        "decoded_tokens": [10.0] * n,
        "seconds": [0.5] * n,
    }
    for split in ("calib", "test"):
        datasets.Dataset.from_dict(rows).save_to_disk(str(folder / split))
    from workbench.metrics.ranking import auroc

    value = auroc(np.asarray(good), np.asarray(labels))
    split_summary = {"auroc_correct_contains": {"good": value}, "nan_count": {"good": 0}}
    summary = {"features": ["good"], "splits": {"calib": split_summary, "test": split_summary}}
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "metadata.json").write_text(
        json.dumps({"nli_judge": "answer_equivalence", "settings": {"samples": 5, "temperature": 0.7}})
    )


@pytest.mark.parametrize("positives", [1, MIN_PER_CLASS - 1, MIN_PER_CLASS, 20])
def test_interval_only_with_enough_answers_of_each_class(tmp_path, positives):
    write_collect(tmp_path, positives)
    lines = feature_section(tmp_path, tmp_path)
    row = next(line for line in lines if line.startswith("| good |"))
    interval = row.split("|")[4].strip()
    warned = any("anecdotal" in line for line in lines)
    if positives < MIN_PER_CLASS:
        assert interval == "–" and warned
    else:
        low, high = (float(v) for v in interval.split(" – "))
        assert 0.0 <= low <= high <= 1.0 and not warned
    assert (tmp_path / "feature_auroc.png").stat().st_size > 1000


def test_the_auroc_plot_has_error_bars_from_the_table_s_intervals(tmp_path, drawn):
    from tests.plot_capture import error_bars

    write_collect(tmp_path, 20)
    lines = feature_section(tmp_path, tmp_path)
    row = next(line for line in lines if line.startswith("| good |"))
    low, high = (float(v) for v in row.split("|")[4].strip().split(" – "))
    (ax,) = drawn
    ((x, bar_low, bar_high),) = error_bars(ax)  # the `test` bar of the one feature (calib has no interval)
    assert x > 0 and (round(bar_low, 2), round(bar_high, 2)) == (low, high)
    assert "90% BCa interval on test" in ax.get_title().replace("\n", " ")
    assert [line.get_ydata()[0] for line in ax.get_lines() if line.get_label() == "chance"] == [0.5]
