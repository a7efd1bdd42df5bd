"""The calibrate stage chooses each feature's calibrator (``calibrate.kind: auto``, the default), records the choice
where the classifier, the bundle and the report read it, and says when a calibrator loses ranking; the report's
LR weights flag a weight the held-out AUROC contradicts."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from tests.unit.core.test_calibrate_classify import _collection, _ctx, _rows
from workbench.calibration import CalibratorChoice, out_of_fold_predict
from workbench.core.errors import ConfigError
from workbench.methods.learned import load_learned
from workbench.stages.calibrate import run as calibrate
from workbench.stages.calibrate.report import calibration_lines
from workbench.stages.classify.report import lr_weight_lines


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A 30-question fit split (where isotonic overfits) and a 60-question test split."""
    tmp = tmp_path_factory.mktemp("choice")
    return tmp, _collection(tmp, _rows(30, 10), _rows(60, 11))


def test_auto_chooses_per_feature_and_records_the_choice_everywhere(small, tmp_path):
    _, collect_dir = small
    ctx = _ctx(tmp_path, "calibrate", {"collect": collect_dir})
    assert ctx.config.calibrate.kind == "auto"  # the default
    out = calibrate.run(ctx)
    summary = json.loads((ctx.out_dir / "summary.json").read_text())
    saved = load_learned(ctx.out_dir / "calibrators.json", expect={"calibrator_set"})
    assert summary["candidates"] == ["isotonic", "centered_isotonic", "platt", "beta"]
    assert set(summary["choices"]) == {"good", "noise"} and saved.choices() == summary["choices"]
    data = json.loads((ctx.out_dir / "calibrated.json").read_text())
    y = np.asarray(data["calib"]["label"])
    for name, record in summary["choices"].items():
        choice = CalibratorChoice.from_dict(record)
        assert saved.calibrators[name].kind == choice.chosen and choice.rule in ("log_loss", "ranking")
        expected = out_of_fold_predict(choice.chosen, data["calib"]["raw"][name], y, choice.folds, ctx.config.seed)
        np.testing.assert_allclose(data["calib"]["calibrated"][name], expected)  # the fit split: out of fold
    good = CalibratorChoice.from_dict(summary["choices"]["good"])
    assert good.chosen != "isotonic" and not good.ranking_lost
    assert out["calibrators"] == dict(Counter(c.kind for c in saved.calibrators.values()))
    metrics = json.loads((ctx.out_dir / "metrics.json").read_text())["good"]["test"]
    assert metrics["after"]["auroc"] == pytest.approx(metrics["before"]["auroc"], abs=1e-9)  # a monotone map
    lines = "\n".join(calibration_lines(ctx.out_dir, tmp_path)[0])
    assert "Calibrators chosen per feature" in lines and "| good | `" + good.chosen + "` |" in lines
    assert "| log loss isotonic | log loss centered_isotonic | log loss platt | log loss beta |" in lines


def test_a_recipe_that_names_isotonic_gets_it_with_the_ranking_loss_said(small, tmp_path):
    _, collect_dir = small
    ctx = _ctx(tmp_path, "calibrate", {"collect": collect_dir}, calibrate={"kind": "isotonic"})
    out = calibrate.run(ctx)
    summary = json.loads((ctx.out_dir / "summary.json").read_text())
    good = CalibratorChoice.from_dict(summary["choices"]["good"])
    assert summary["candidates"] == ["isotonic"] and good.rule == "fixed" and good.ranking_lost
    assert "good" in out["ranking_lost"]
    lines = "\n".join(calibration_lines(ctx.out_dir, tmp_path)[0])
    assert "`isotonic` calibrators" in lines and "| **lost** |" in lines
    assert "- **good**: isotonic (set by the recipe" in lines and "RANKING LOST" in lines


def test_bad_calibrator_settings_are_refused_at_load():
    from workbench.recipe import load_recipe

    with pytest.raises(ConfigError, match=r"calibrate\.candidates"):
        load_recipe("quickstart", ["calibrate.candidates=[platt,platt]"])
    with pytest.raises(ConfigError, match=r"calibrate\.rank_tolerance"):
        load_recipe("quickstart", ["calibrate.rank_tolerance=2"])
    with pytest.raises(ConfigError, match=r"classify\.router_calibrators"):
        load_recipe("quickstart", ["classify.router_search=study", "classify.router_calibrators=[platt]"])


def test_the_lr_weights_flag_a_feature_that_ranks_below_chance_on_the_held_out_split(tmp_path):
    from workbench.classify.weight_flags import flag_weights

    rng = np.random.default_rng(0)
    labels = (rng.random(80) < 0.6).astype(float)
    good = labels + rng.normal(scale=0.5, size=80)  # AUROC well above 0.5
    against = -labels + rng.normal(scale=0.8, size=80)  # AUROC below 0.5
    pred = {
        "features": {"good": good.tolist(), "against": against.tolist(), "flat": np.zeros(80).tolist()},
        "lr_weights": {"good": 0.4, "against": 1.3, "flat": 0.2, "(intercept)": -2.0},
    }
    (flag,) = flag_weights(pred["lr_weights"], pred["features"], labels)
    assert flag.feature == "against" and flag.largest and flag.auroc < 0.5
    mirror = flag_weights({"good": -0.5, "against": -0.1}, pred["features"], labels)
    assert [(f.feature, f.largest) for f in mirror] == [("good", True)]  # a negative weight on a telling feature
    lines = lr_weight_lines(pred, labels, "test", tmp_path)
    assert lines[0].startswith("**LR weights that `test` contradicts**")
    assert f"`against` +1.3 (the largest weight) with AUROC {flag.auroc:.3f}" in lines[0] and "`good`" not in lines[0]
    assert "![LR weights](lr_weights.png)" in lines and (tmp_path / "lr_weights.png").stat().st_size > 2000
    assert lr_weight_lines({**pred, "lr_weights": {"good": 0.4}}, labels, "test", tmp_path)[0].startswith("![")
