"""Choosing each feature's calibrator by out-of-fold log loss, guarded by the raw score's ranking; the record of the
choice, how it travels in a calibrator set, and the ``auto`` kind."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.calibration import CalibratorChoice, choose_calibrator, make_calibrator, out_of_fold_predict
from workbench.calibration.calibrator_set import CalibratorSet
from workbench.calibration.choice import LOG_LOSS_CLIP, choice_notes, mean_log_loss
from workbench.core.errors import ConfigError, DataError
from workbench.metrics.ranking import auroc


def _logistic(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """P(correct | s) = σ(1.5 s): a smooth truth."""
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    return s, (rng.random(n) < 1.0 / (1.0 + np.exp(-1.5 * s))).astype(float)


def _step(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """P(correct | s) = 0.1 below 0, 0.9 above: a step no sigmoid follows."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(-1.0, 1.0, size=n)
    return s, (rng.random(n) < np.where(s < 0.0, 0.1, 0.9)).astype(float)


def _choice(calibrator) -> CalibratorChoice:
    return CalibratorChoice.from_dict(calibrator.choice)


def test_on_few_rows_isotonic_overfits_and_a_smoother_calibrator_is_chosen():
    chosen = []
    for seed in range(10):
        s, y = _logistic(30, seed)
        calibrator, _ = choose_calibrator(s, y, seed=seed)
        choice = _choice(calibrator)
        isotonic = next(c for c in choice.candidates if c.kind == "isotonic")
        assert choice.chosen != "isotonic"  # a worse out-of-fold log loss, or plateaus that cost ranking
        assert isotonic.log_loss > choice.chosen_fit.log_loss or not isotonic.keeps_ranking
        chosen.append(choice.chosen)
    assert sum(kind in ("platt", "beta") for kind in chosen) >= 8, chosen


def test_on_many_rows_of_a_step_isotonic_is_chosen():
    s, y = _step(2000, 0)
    calibrator, _ = choose_calibrator(s, y)
    choice = _choice(calibrator)
    assert choice.chosen == "isotonic" and choice.rule == "log_loss" and not choice.ranking_lost
    losses = {c.kind: c.log_loss for c in choice.candidates}
    assert losses["isotonic"] < losses["platt"] - 0.03 and losses["isotonic"] < losses["beta"] - 0.03


def test_the_measurements_are_out_of_fold_on_the_same_folds_for_every_kind():
    s, y = _logistic(60, 1)
    calibrator, oof = choose_calibrator(s, y, folds=4, seed=7)
    choice = _choice(calibrator)
    assert choice.folds == 4 and choice.raw_auroc == pytest.approx(auroc(s, y), abs=1e-6)
    for candidate in choice.candidates:
        expected = out_of_fold_predict(candidate.kind, s, y, 4, 7)
        assert candidate.log_loss == pytest.approx(mean_log_loss(expected, y), abs=1e-6)
        assert candidate.auroc == pytest.approx(auroc(expected, y), abs=1e-6)
        if candidate.kind == choice.chosen:
            np.testing.assert_array_equal(oof, expected)
    np.testing.assert_array_equal(calibrator.predict(s), make_calibrator(choice.chosen).fit(s, y).predict(s))
    # a probability of 0 that the label contradicts costs ln(1 / clip), not infinity
    assert mean_log_loss(np.array([0.0]), np.array([1.0])) == pytest.approx(-np.log(LOG_LOSS_CLIP))


def test_when_the_lowest_loss_kind_loses_ranking_the_best_kind_that_keeps_it_is_chosen_and_said():
    # a step on many rows: isotonic has the lowest log loss, and out of fold its plateaus rank a little worse than the
    # raw score; with no tolerance for that, a strictly increasing calibrator is shipped instead
    s, y = _step(2000, 0)
    calibrator, _ = choose_calibrator(s, y, rank_tolerance=0.0)
    choice = _choice(calibrator)
    isotonic = next(c for c in choice.candidates if c.kind == "isotonic")
    assert isotonic.log_loss == min(c.log_loss for c in choice.candidates) and not isotonic.keeps_ranking
    assert choice.rule == "ranking" and choice.chosen in ("platt", "beta") and calibrator.strictly_increasing
    assert not choice.ranking_lost
    kept = [c for c in choice.candidates if c.keeps_ranking]
    assert choice.chosen == min(kept, key=lambda c: c.log_loss).kind
    assert "isotonic had the lowest log loss but ranks worse than the raw score" in choice.describe()


def test_a_calibrator_that_loses_ranking_is_never_shipped_without_saying_so():
    # isotonic on 30 rows: its out-of-fold AUROC falls below the raw score's (0.808 → 0.681 here; so for each of
    # seeds 0–11), the quickstart's 0.705 → 0.582 in small
    s, y = _logistic(30, 0)
    fixed, _ = choose_calibrator(s, y, ("isotonic",))  # the recipe named the kind: measured, not chosen
    choice = _choice(fixed)
    assert choice.rule == "fixed" and choice.ranking_lost
    assert choice.chosen_fit.auroc < choice.raw_auroc - 0.01
    assert "RANKING LOST" in choice.describe() and "set by the recipe" in choice.describe()
    stepwise, _ = choose_calibrator(s, y, ("isotonic", "centered_isotonic"))  # no candidate keeps it
    choice = _choice(stepwise)
    assert choice.ranking_lost and "no candidate kept it" in choice.describe()
    (note,) = [line for line in choice_notes({"conf": stepwise.choice}) if "loses ranking" in line]
    assert note.startswith("calibrators: the calibrator of conf loses ranking")


def test_too_few_of_a_class_compares_nothing_and_fits_a_strictly_increasing_kind():
    s = np.arange(12.0)
    y = np.r_[np.zeros(11), 1.0]
    calibrator, oof = choose_calibrator(s, y)
    choice = _choice(calibrator)
    assert oof is None and choice.rule == "too_few" and choice.folds == 0
    assert choice.chosen == "platt" and calibrator.strictly_increasing and not choice.ranking_lost


def test_the_auto_kind_chooses_when_fitted_and_saves_as_the_chosen_kind():
    s, y = _logistic(40, 2)
    auto = make_calibrator("auto", seed=3)
    assert auto.kind == "auto" and not auto.is_fitted
    auto.fit(s, y)
    direct, _ = choose_calibrator(s, y, seed=3)
    assert auto.to_dict() == direct.to_dict() and auto.choice == direct.choice
    np.testing.assert_array_equal(auto.predict(s), direct.predict(s))
    again = make_calibrator("auto", seed=3).fit(s, y)  # the same data and options: the choice is reused, same answer
    assert again.to_dict() == auto.to_dict() and again.resolved() is not auto.resolved()
    with pytest.raises(ConfigError, match="calibrator candidates"):
        make_calibrator("auto", kinds=("isotonic", "sigmoid"))
    with pytest.raises(ConfigError, match="calibrator folds"):
        make_calibrator("auto", folds=1)
    with pytest.raises(DataError, match="one class only"):
        choose_calibrator(s, np.ones_like(s))


def test_a_calibrator_set_saves_and_checks_the_choices():
    s, y = _logistic(40, 4)
    conf = make_calibrator("auto").fit(s, y)
    ent = make_calibrator("platt").fit(-s, y)  # a fixed calibrator: no record
    calibrators = CalibratorSet(("conf", "ent"), {"conf": conf, "ent": ent}, {"conf": 0.0, "ent": 0.0})
    d = json.loads(json.dumps(calibrators.to_dict()))
    assert set(d["choices"]) == {"conf"} and d["calibrators"]["conf"]["kind"] == d["choices"]["conf"]["chosen"]
    loaded = CalibratorSet.from_dict(d)
    assert loaded.choices() == {"conf": conf.choice} and loaded.calibrators["ent"].choice is None
    assert CalibratorSet.from_dict(loaded.to_dict()).to_dict() == d
    record = d["choices"]["conf"]
    other = next(c["kind"] for c in record["candidates"] if c["kind"] != record["chosen"])
    for tamper, message in [
        ({"conf": {**record, "chosen": other}}, "does not name the kind"),
        ({"ent": record}, "does not name the kind"),
        ({"nope": record}, "feature the set does not have"),
        ({"conf": {**record, "extra": 1}}, "exactly the keys"),
        ({"conf": {**record, "rule": "vibes"}}, "rule must be one of"),
        ({"conf": {**record, "raw_auroc": "high"}}, "finite number or null"),
        ({"conf": {**record, "candidates": [{**record["candidates"][0], "kind": "sigmoid"}]}}, "candidate kind"),
        ([], "mapping of feature to record"),
    ]:
        with pytest.raises(DataError, match=message) as info:
            CalibratorSet.from_dict({**d, "choices": tamper})
        assert "\n" not in str(info.value) and "vibes" not in str(info.value) and "sigmoid" not in str(info.value)
