"""Cross-stage settings (issue 27, items 4 and 5): one table of key pairs with their reasons, checked by one function
at load — every pair refused when unequal and accepted when both ends move together; the generation budget compared
is the one D²-RAG's utility features really use (``evaluate.max_new_tokens``), and the utility's class cuts
(``fit_utility.tau_pos`` / ``tau_neg``) are D²-RAG's. Issue 41 (item 1): no split a shipped part or parameter is
fitted or tuned on is a split the run reports as held-out, refused naming both keys with their file and line."""

from __future__ import annotations

import pytest

from workbench.core.errors import ConfigError
from workbench.core.paths import recipes_dir
from workbench.recipe import load_recipe
from workbench.stages.agreements import AGREEMENT_WHEN, AGREEMENTS, SPLIT_AGREEMENTS, setting

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
    message = refused("quickstart", "calibrate.fit_split=train")
    assert "calibrate.fit_split: 'train' is not among collect.splits ['calib', 'test']" in message
    assert "the calibrators are fitted on collected rows" in message
    both = load_recipe("quickstart", ["calibrate.fit_split=train", "collect.splits=[calib,test,train]"]).config
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


# ------------------------------------------------------------------ issue 41, item 1: held-out means held out

SPLIT_CASES = {
    # (key, other): (recipe, overrides that make the pair's condition hold and break it)
    ("study.split", "evaluate.split"): ("quickstart", ["study.split=test"]),
    ("study.split", "study.test_split"): ("study", ["study.test_split=val"]),
    ("study.split", "transfer.split"): (
        "evaluate",
        [
            "stages=[build_data,collect,calibrate,classify,fit_utility,study,transfer]",
            "study.methods=[dtr]",
            "study.test_split=ood",
            "study.split=test",
        ],
    ),
    ("calibrate.fit_split", "evaluate.split"): ("quickstart", ["calibrate.fit_split=test"]),
    ("calibrate.fit_split", "study.test_split"): ("quickstart", ["study.test_split=calib"]),
    ("calibrate.ood_split", "study.test_split"): ("study", ["calibrate.ood_split=test"]),
    ("fit_utility.split", "evaluate.split"): ("quickstart", ["fit_utility.split=test"]),
    ("fit_utility.split", "study.test_split"): ("study", ["fit_utility.split=test"]),
    ("collect.lars_fit_split", "evaluate.split"): (
        "quickstart",
        ["collect.features=[confidence,lars]", "collect.lars_fit_split=test"],
    ),
    ("collect.lars_fit_split", "study.test_split"): (
        "study",
        ["collect.features=[confidence,lars]", "collect.lars_fit_split=test"],
    ),
    ("tune_reader.split", "evaluate.split"): (
        "tune-reader",
        ["stages=[build_data,tune_reader,evaluate]", "evaluate.methods=[no_rag]", "tune_reader.split=test"],
    ),
    ("distill_data.split", "evaluate.split"): ("distill", ["distill_data.split=test"]),
}


def test_every_split_a_shipped_part_is_fitted_on_is_declared_against_the_held_out_splits():
    assert {(a.key, a.other) for a in SPLIT_AGREEMENTS} == set(SPLIT_CASES)
    assert all(a.relation == "differs" and a.when in AGREEMENT_WHEN and a.reason for a in SPLIT_AGREEMENTS)
    fitted = {a.key for a in SPLIT_AGREEMENTS}
    assert {"study.split", "calibrate.fit_split", "fit_utility.split", "collect.lars_fit_split"} <= fitted
    assert {"tune_reader.split", "distill_data.split"} <= fitted
    assert {a.other for a in SPLIT_AGREEMENTS} == {"evaluate.split", "study.test_split", "transfer.split"}


@pytest.mark.parametrize("pair", SPLIT_AGREEMENTS, ids=lambda a: f"{a.key}-{a.other}")
def test_a_fit_on_a_held_out_split_is_refused_naming_both_keys(pair):
    recipe, overrides = SPLIT_CASES[pair.key, pair.other]
    message = refused(recipe, *overrides)
    value = setting(load_recipe(recipe).config, pair.key)[0]
    value = dict(o.split("=", 1) for o in overrides).get(pair.key, value)
    assert f"{pair.key}: {value!r} is also {pair.other}: {pair.reason} ({pair.other}: " in message, message
    assert "\n" not in message
    # held apart, the same recipe loads
    kept = load_recipe(recipe, [o for o in overrides if not o.startswith((pair.key, pair.other))]).config
    assert setting(kept, pair.key)[0] != setting(kept, pair.other)[0]


def test_both_keys_are_named_with_their_file_and_line(tmp_path):
    path = tmp_path / "r.yaml"
    text = (recipes_dir() / "quickstart.yaml").read_text()
    text = text.replace("\n  limit: 8 ", "\n  split: test\n  limit: 8 ", 1)  # into the study section
    path.write_text(text)
    lines = text.splitlines()
    study_line = lines.index("  split: test") + 1
    evaluate_line = lines.index("evaluate:") + 2
    assert lines[evaluate_line - 1].startswith("  split: test ")
    with pytest.raises(ConfigError) as err:
        load_recipe(str(path))
    message = str(err.value)
    assert message.startswith(f"{path}:{study_line}: study.split: 'test' is also evaluate.split: the study tunes")
    assert message.endswith(f"(evaluate.split: {path}:{evaluate_line})")


def test_the_other_key_at_its_default_is_said_to_be_one():
    message = refused(
        "tune-reader", "stages=[build_data,tune_reader,evaluate]", "evaluate.methods=[no_rag]", "tune_reader.split=test"
    )
    assert message.startswith("command line: tune_reader.split: 'test' is also evaluate.split: ")
    assert message.endswith("(evaluate.split: its default, not set in " + str(recipes_dir() / "tune-reader.yaml") + ")")


def test_workbench_validate_refuses_it_in_one_line_with_exit_2(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "r.yaml"
    path.write_text(
        (recipes_dir() / "quickstart.yaml").read_text().replace("\n  limit: 8 ", "\n  split: test\n  limit: 8 ", 1)
    )
    out = subprocess.run(
        [sys.executable, "-m", "workbench", "validate", str(path)], capture_output=True, text=True, timeout=300
    )
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr
    assert lines[0].startswith(f"error: {path}:") and "study.split: 'test' is also evaluate.split: " in lines[0]
    assert lines[0].endswith(f"(evaluate.split: {path}:{_evaluate_split_line(path)})")


def _evaluate_split_line(path) -> int:
    lines = path.read_text().splitlines()
    return lines.index("evaluate:") + 2
