"""Whether a study's D²-RAG τ replaces classify's: only when the recipe asks (study.ship_tau) and the study could
tell its trials apart — hand-made trial tables."""

from __future__ import annotations

import pytest

from workbench.stages.study.run import tau_verdict


def _trials(*values: float) -> list[dict]:
    return [{"number": i, "metrics": {"contains": v}} for i, v in enumerate(values)]


def _scores(best: float, defaults: float) -> dict:
    return {"best": {"val": {"contains": best}}, "defaults": {"val": {"contains": defaults}}}


def test_a_study_that_separates_its_trials_ships_its_tau_only_when_asked():
    trials, scores = _trials(0.5, 0.6, 0.7, 0.8, 0.65, 0.55), _scores(0.8, 0.6)
    shipped = tau_verdict(trials, scores, "contains", ship=True)
    assert shipped["ship"] and shipped["separated"] and shipped["tied"] == 1 and shipped["trials"] == 6
    assert shipped["reason"].startswith("replaces classify's τ")
    kept = tau_verdict(trials, scores, "contains", ship=False)
    assert not kept["ship"] and kept["separated"] and "study.ship_tau is false" in kept["reason"]


def test_most_trials_tying_keeps_classifys_tau_and_says_so():
    # the study: 20 trials on 6 questions, all but 4 tied with the chosen one
    trials = _trials(*([5 / 6] * 16), 4 / 6, 4 / 6, 3 / 6, 2 / 6)
    verdict = tau_verdict(trials, _scores(5 / 6, 4 / 6), "contains", ship=True)
    assert not verdict["ship"] and not verdict["separated"] and verdict["tied"] == 16
    assert "cannot separate its trials (16 of 20 trials tie with the chosen one" in verdict["reason"]
    assert "classify's τ is kept" in verdict["reason"]


def test_exactly_half_tying_separates_but_not_beating_classifys_tau_does_not():
    half = tau_verdict(_trials(0.8, 0.8, 0.5, 0.6), _scores(0.8, 0.6), "contains", ship=True)
    assert half["ship"] and half["tied"] == 2
    same = tau_verdict(_trials(0.5, 0.6, 0.7, 0.8), _scores(0.8, 0.8), "contains", ship=True)
    assert not same["ship"] and "no better than classify's τ (0.800)" in same["reason"]


@pytest.mark.parametrize("noise", [1e-9, -1e-9])
def test_ties_are_counted_at_six_decimals(noise):
    verdict = tau_verdict(_trials(0.7 + noise, 0.7, 0.7, 0.1), _scores(0.7, 0.1), "contains", ship=True)
    assert verdict["tied"] == 3 and not verdict["ship"]
