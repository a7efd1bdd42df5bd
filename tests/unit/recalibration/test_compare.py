"""Feedback reading and the held-out comparison of ``workbench recalibrate`` (workbench/recalibration)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.core.errors import DataError
from workbench.recalibration.compare import MIN_PER_CLASS, holdout_split, recalibrate
from workbench.recalibration.feedback import read_feedback

from .feedback_data import shifted_rows, tiny_calibrators, write_jsonl


def test_refit_on_shifted_feedback_is_better_on_the_held_out_part(tmp_path):
    calibrators = tiny_calibrators()
    path = write_jsonl(tmp_path / "feedback.jsonl", shifted_rows(300))
    feedback = read_feedback(path, calibrators.features)
    result = recalibrate(calibrators, feedback, holdout=0.3, seed=0, n_resamples=100)
    assert result.better and result.holdout_rows + result.fit_rows == 300
    mean = result.metrics["mean_ece"]
    assert mean["after"] < mean["before"] - 0.1
    assert mean["change_ci"]["high"] < 0  # the interval of the change excludes no change
    for name in calibrators.features:
        ece = result.metrics["features"][name]["ece"]
        assert ece["before_ci"]["method"] in ("BCa", "percentile") and ece["before_ci"]["low"] <= ece["before"]
    assert result.calibrators.features == calibrators.features
    assert [result.calibrators.calibrators[f].kind for f in calibrators.features] == [
        calibrators.calibrators[f].kind for f in calibrators.features
    ]


def test_split_is_stratified_and_seeded():
    labels = np.array([0] * 70 + [1] * 30)
    mask = holdout_split(labels, 0.3, seed=3)
    assert int(mask[labels == 0].sum()) == 21 and int(mask[labels == 1].sum()) == 9
    assert np.array_equal(mask, holdout_split(labels, 0.3, seed=3))
    assert not np.array_equal(mask, holdout_split(labels, 0.3, seed=4))


def test_too_small_held_out_part_names_the_size_it_needs(tmp_path):
    calibrators = tiny_calibrators()
    feedback = read_feedback(write_jsonl(tmp_path / "f.jsonl", shifted_rows(60)), calibrators.features)
    with pytest.raises(DataError, match=rf"too small.*needs {MIN_PER_CLASS} of each label, so about \d+ feedback rows"):
        recalibrate(calibrators, feedback, holdout=0.3, n_resamples=50)


def test_not_better_is_refused_unless_forced(tmp_path):
    features = tiny_calibrators().features
    first = read_feedback(write_jsonl(tmp_path / "a.jsonl", shifted_rows(400, seed=1)), features)
    # a set already fitted on 280 rows of this relation, against a refit on the few fit rows of fresh feedback
    fitted = recalibrate(tiny_calibrators(), first, holdout=0.3, n_resamples=20).calibrators
    fresh = read_feedback(write_jsonl(tmp_path / "b.jsonl", shifted_rows(200, seed=2)), features)
    with pytest.raises(DataError, match=r"not better on the held-out part \(mean ECE .* before, .* after\)"):
        recalibrate(fitted, fresh, holdout=0.8, n_resamples=20)
    assert not recalibrate(fitted, fresh, holdout=0.8, n_resamples=20, force=True).better


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda rows: rows[2].update(label=2), r"row 3: field 'label' must be 0 or 1"),
        (lambda rows: rows[2].update(label=True), r"row 3: field 'label' must be 0 or 1"),
        (lambda rows: rows[3].update(id="q0"), r"row 4: field 'id' repeats the id of row 1"),
        (lambda rows: rows[1]["features"].pop("entropy"), r"row 2: field 'features.entropy' is missing"),
        (lambda rows: rows[1]["features"].update(entropy="x"), r"row 2: field 'features.entropy' must be a number"),
    ],
)
def test_bad_feedback_is_one_line_naming_file_row_and_field(tmp_path, edit, message):
    rows = shifted_rows(5)
    edit(rows)
    path = write_jsonl(tmp_path / "f.jsonl", rows)
    with pytest.raises(DataError, match=message) as info:
        read_feedback(path, tiny_calibrators().features)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_features_come_from_the_scores_file_by_id(tmp_path):
    features = tiny_calibrators().features
    rows = shifted_rows(4)
    scores = [
        {"id": r["id"], "position": i, "features": {**r.pop("features"), "other": None}} for i, r in enumerate(rows)
    ]
    scores[1]["features"]["entropy"] = None
    scores_path = write_jsonl(tmp_path / "scores.jsonl", scores[::-1])
    read = read_feedback(write_jsonl(tmp_path / "f.jsonl", rows), features, scores_path)
    assert [r.id for r in read] == ["q0", "q1", "q2", "q3"]
    assert read[0].features == tuple(scores[0]["features"][f] for f in features)
    assert np.isnan(read[1].features[features.index("entropy")])
    scores[0]["answer"] = "another answer"
    write_jsonl(tmp_path / "scores.jsonl", scores)
    with pytest.raises(DataError, match=r"f.jsonl: row 1: field 'answer' differs from the answer row 1 of .*scores"):
        read_feedback(tmp_path / "f.jsonl", features, scores_path)
    scores[0]["answer"] = rows[0]["answer"]
    write_jsonl(tmp_path / "scores.jsonl", scores)
    rows[2]["id"] = "unknown"
    with pytest.raises(DataError, match=r"f.jsonl: row 3: field 'id' is not an id of the scores file"):
        read_feedback(write_jsonl(tmp_path / "f.jsonl", rows), features, scores_path)
    with pytest.raises(DataError, match=r"row 1: field 'features' is missing and no scores file"):
        read_feedback(tmp_path / "f.jsonl", features)
    json.loads(scores_path.read_text().splitlines()[0])
