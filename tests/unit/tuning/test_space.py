"""Search spaces: defaults, and every malformed spec refused with the key named."""

from __future__ import annotations

import pytest

from workbench.core.errors import ConfigError
from workbench.tuning.space import DEFAULT_SPACES, TUNABLE, parse_space, parse_spaces


def test_default_spaces_parse_and_mark_thresholds():
    spaces = parse_spaces(list(DEFAULT_SPACES), {}, "study.space")
    assert [s.name for s in spaces["dtr"]] == ["tau"] and spaces["dtr"][0].log and spaces["dtr"][0].threshold
    d2rag = {s.name: s for s in spaces["d2rag"]}
    assert d2rag["tau"].threshold and not d2rag["alpha_pos"].threshold
    assert spaces["dense_rag"][0].breakpoints


def test_ranges_choices_and_ints():
    specs = parse_space(
        "dtr",
        {"tau": {"low": 0.1, "high": 2}, "rule": {"choices": ["cos_sum", "score_sum"]}, "k": {"low": 1, "high": 4}},
        "s",
    )
    by = {s.name: s for s in specs}
    assert by["tau"].kind == "float" and by["rule"].choices == ("cos_sum", "score_sum") and by["k"].kind == "int"
    assert by["k"].to_dict() == {"low": 1.0, "high": 4.0, "int": True}


@pytest.mark.parametrize(
    ("method", "space", "message", "where"),
    [
        ("dtr", {"tau": {"low": 2, "high": 1}}, "empty or inverted range", "s.tau"),
        ("dtr", {"tau": {"low": 1, "high": 1}}, "empty or inverted range", "s.tau"),
        ("dtr", {"tau": {"low": 0, "high": 1, "log": True}}, "log range needs low > 0", "s.tau"),
        ("dtr", {"tau": {"low": -1, "high": 1}}, "below the smallest valid value", "s.tau.low"),
        ("dtr", {"nope": {"low": 0, "high": 1}}, "unknown parameter 'nope'", "s.nope"),
        ("dtr", {"rule": {"low": 0, "high": 1}}, "takes names", "s.rule"),
        ("dtr", {"rule": {"choices": []}}, "non-empty list", "s.rule"),
        ("dtr", {"k": {"choices": [1.5]}}, "integers", "s.k"),
        ("dtr", {"tau": {"low": 0, "hi": 1}}, "expected keys", "s.tau"),
        ("d2rag", {"tau": {"low": 0, "high": 2}}, "above the largest valid value", "s.tau.high"),
        ("dtr", {"tau": {"breakpoints": True}}, "only for dense_rag.theta", "s.tau"),
        ("no_rag", {"tau": {"low": 0, "high": 1}}, "nothing to tune", "s"),
        ("dtr", {}, "non-empty mapping", "s"),
    ],
)
def test_bad_spaces_name_the_key(method, space, message, where):
    with pytest.raises(ConfigError) as info:
        parse_space(method, space, "s")
    assert message in info.value.what and info.value.where == where


def test_space_for_a_method_not_studied_is_refused():
    with pytest.raises(ConfigError, match=r"not in study\.methods"):
        parse_spaces(["dtr"], {"d2rag": {"tau": {"low": 0, "high": 1}}}, "study.space")


def test_every_tunable_name_is_a_method_option_or_d2rag_tau():
    from dataclasses import fields

    from workbench.methods.registry import settings_class

    for method, params in TUNABLE.items():
        names = {f.name for f in fields(settings_class(method))}
        assert set(params) - names <= ({"tau"} if method == "d2rag" else set())
