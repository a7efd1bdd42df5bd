"""Cross-stage settings (issue 27, items 4 and 5): one table of key pairs with their reasons, checked by one function
at load — every pair refused when unequal and accepted when both ends move together; the generation budget compared
is the one D²-RAG's utility features really use (``evaluate.max_new_tokens``), and the utility's class cuts
(``fit_utility.tau_pos`` / ``tau_neg``) are D²-RAG's."""

from __future__ import annotations

import pytest

from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe
from workbench.stages.agreements import AGREEMENT_WHEN, AGREEMENTS, setting

EQUAL = tuple(a for a in AGREEMENTS if a.relation == "equal")


def refused(name: str, *overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_recipe(name, list(overrides))
    return str(err.value)


def _changed(value: object) -> object:
    """Another valid value of a setting: an integer + 1, a τ halved (stays inside −1 ≤ τ_neg < τ_pos ≤ 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AssertionError(f"no rule for {value!r}")
    return value + 1 if isinstance(value, int) else round(float(value) / 2, 4)


def test_the_table_holds_every_cross_stage_pair_with_its_reason():
    assert [(a.key, a.relation, a.other) for a in AGREEMENTS] == [
        ("fit_utility.k", "equal", "evaluate.options.d2rag.k"),
        ("fit_utility.passage_chars", "equal", "evaluate.passage_chars"),
        ("fit_utility.max_new_tokens", "equal", "evaluate.max_new_tokens"),
        ("fit_utility.tau_pos", "equal", "evaluate.options.d2rag.tau_pos"),
        ("fit_utility.tau_neg", "equal", "evaluate.options.d2rag.tau_neg"),
        ("calibrate.fit_split", "among", "collect.splits"),
        ("transfer.split", "among", "collect.splits"),
        ("transfer.split", "differs", "calibrate.fit_split"),
        ("calibrate.ood_split", "differs", "calibrate.fit_split"),
        ("calibrate.ood_split", "differs", "evaluate.split"),
        ("calibrate.ood_split", "differs", "transfer.split"),
    ]
    assert all(a.reason and a.when in AGREEMENT_WHEN for a in AGREEMENTS)


def test_the_old_names_still_import_from_the_recipe():
    from workbench.recipe import AGREEMENT_WHEN as when
    from workbench.recipe import STAGE_AGREEMENTS

    assert STAGE_AGREEMENTS is AGREEMENTS and when is AGREEMENT_WHEN


def test_the_calibrators_fit_split_is_collected():
    message = refused("quickstart", "calibrate.fit_split=val")
    assert "calibrate.fit_split: 'val' is not among collect.splits ['calib', 'test']" in message
    assert "the calibrators are fitted on collected rows" in message
    both = load_recipe("quickstart", ["calibrate.fit_split=test", "collect.splits=[calib,test]"]).config
    assert both.calibrate.fit_split in both.collect.splits


def test_the_transfer_split_is_collected_and_not_the_fit_split():
    config = load_recipe("evaluate").config
    assert "transfer" in config.stages and config.transfer.split in config.collect.splits
    message = refused("evaluate", "transfer.split=val")
    assert "transfer.split: 'val' is not among collect.splits" in message and "in-distribution" in message
    fit = config.calibrate.fit_split
    message = refused("evaluate", f"transfer.split={fit}")
    assert f"transfer.split: {fit!r} is also calibrate.fit_split: in-distribution figures" in message
    splits = f"collect.splits={[*config.collect.splits, 'val']}"
    message = refused("evaluate", "transfer.split=val", splits)  # val sets the OOD threshold by default
    assert "calibrate.ood_split: 'val' is also transfer.split" in message
    other = load_recipe("evaluate", ["transfer.split=val", splits, "calibrate.ood_split=null"])
    assert other.config.transfer.split == "val"


@pytest.mark.parametrize("pair", EQUAL, ids=lambda a: a.key)
def test_each_pair_is_refused_when_unequal_and_loads_when_equal(pair):
    config = load_recipe("quickstart").config
    mine, _ = setting(config, pair.key)
    assert mine == setting(config, pair.other)[0]  # the built-in recipe keeps them equal
    value = _changed(mine)
    message = refused("quickstart", f"{pair.key}={value}")
    assert f"{pair.key}: is {value} but {pair.other} is {mine}" in message and pair.reason in message
    message = refused("quickstart", f"{pair.other}={value}")
    assert f"{pair.key}: is {mine} but {pair.other} is {value}" in message
    both = load_recipe("quickstart", [f"{pair.key}={value}", f"{pair.other}={value}"]).config
    assert setting(both, pair.key)[0] == setting(both, pair.other)[0] == value


def test_an_unset_method_option_is_compared_at_its_default_and_says_so():
    message = refused("quickstart", "fit_utility.tau_neg=-0.2")
    assert "fit_utility.tau_neg: is -0.2 but evaluate.options.d2rag.tau_neg is -0.1 (its default)" in message


def test_the_pairs_hold_when_only_a_study_reads_the_utility():
    # the study recipe evaluates nothing and exports nothing, but tunes D²-RAG with the fitted utility
    assert "fit_utility.k: is 3 but evaluate.options.d2rag.k is 2" in refused("study", "fit_utility.k=3")
    dtr_only = ["fit_utility.k=3", "study.methods=[dtr]", "study.space={}"]
    assert load_recipe("study", dtr_only).config.fit_utility.k == 3


def test_the_budget_compared_is_the_one_the_utility_features_use():
    # D²-RAG's own max_new_tokens sets only its final answer; its utility features are generated at
    # evaluate.max_new_tokens (the answering tools' budget), which fit_utility.max_new_tokens must equal
    assert load_recipe("quickstart", ["evaluate.options.d2rag.max_new_tokens=12"]).config.fit_utility.max_new_tokens
    message = refused("quickstart", "fit_utility.max_new_tokens=12", "evaluate.options.d2rag.max_new_tokens=12")
    assert "fit_utility.max_new_tokens: is 12 but evaluate.max_new_tokens is 16" in message


def test_the_utility_class_cuts_are_d2rags():
    message = refused("quickstart", "evaluate.options.d2rag.tau_pos=0.2")
    assert "fit_utility.tau_pos: is 0.12 but evaluate.options.d2rag.tau_pos is 0.2" in message
    config = load_recipe("quickstart", ["evaluate.options.d2rag.tau_pos=0.2", "fit_utility.tau_pos=0.2"]).config
    assert config.fit_utility.tau_pos == 0.2
    assert "fit_utility.tau_neg: need -1 <= tau_neg < tau_pos <= 1" in refused("quickstart", "fit_utility.tau_pos=-0.5")


def test_tau_pos_and_tau_neg_stay_out_of_a_study_space_under_a_utility_classifier():
    space = "study.space={d2rag: {tau: {low: 0, high: 1}, tau_neg: {low: -0.5, high: 0}}}"
    message = refused("study", space)
    assert "study.space.d2rag.tau_neg: tau_neg changes nothing with fit_utility.model: classifier" in message
    # with the ridge, D²-RAG cuts the predicted δ at its own τ's: they mean something and may be tuned
    assert load_recipe("study", [space, "fit_utility.model=ridge"]).config.fit_utility.model == "ridge"
