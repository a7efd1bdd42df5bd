"""Recipes hardened (issue 25, item 5): alias expansion, file size, value size and nesting are bounded, tags outside
plain data are refused, and every YAML problem is one line naming the file and line — in the loader, in ``key=value``
overrides and through the CLI (``error: ...``, exit status 2). The attacks here are refused by construction, before
they cost time or memory: none of these tests needs a timeout to finish."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from workbench.core.config import (
    MAX_DEPTH,
    MAX_OVERRIDE_CHARS,
    MAX_RECIPE_BYTES,
    MAX_SCALAR_CHARS,
    load_yaml_file,
    parse_override,
    parse_yaml,
)
from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe

GOOD = "name: demo\nstages: [build_data]\n"


def billion_laughs(levels: int = 9, fan_out: int = 9) -> str:
    """The classic alias bomb: a few hundred bytes, ``fan_out ** levels`` strings once expanded."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * fan_out)}]"]
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * fan_out)}]")
    return "\n".join(lines) + "\n"


def flow(text: str) -> str:
    """A block mapping of one-line entries as one flow mapping (what fits in a ``key=value`` override)."""
    return "{" + ", ".join(text.strip().splitlines()) + "}"


def write(tmp_path: Path, text: str, name: str = "r.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def refused(call, *parts: str) -> str:
    """Run ``call``; it must raise a one-line ConfigError containing every one of ``parts``; return the message."""
    with pytest.raises(ConfigError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and "\r" not in message, message
    for part in parts:
        assert part in message, message
    return message


# ------------------------------------------------------------------------------------------------ alias bombs
def test_an_alias_bomb_is_refused_naming_file_and_line(tmp_path):
    bomb = billion_laughs()
    assert len(bomb) < 600  # a billion strings from a few hundred bytes
    path = write(tmp_path, GOOD + bomb)
    refused(lambda: load_recipe(str(path)), f"{path}:", "aliases are expanded")
    refused(lambda: load_yaml_file(path), f"{path}:", "aliases are expanded")


def test_an_alias_bomb_in_an_override_is_refused():
    refused(lambda: parse_override("data.x=" + flow(billion_laughs())), "command line", "aliases are expanded")


def test_an_alias_that_contains_itself_is_refused(tmp_path):
    refused(lambda: parse_yaml("a: &a [x, *a]\n", "r.yaml"), "r.yaml:1", f"nested deeper than {MAX_DEPTH}")
    refused(lambda: parse_yaml("a: &a {b: *a}\n", "r.yaml"), "r.yaml:1", "contains itself")


def test_ordinary_aliases_still_work():
    located = parse_yaml("base: &b [1, 2]\nother: *b\nsame: &s {k: 1}\nagain: *s\n", "r.yaml")
    assert located.data == {"base": [1, 2], "other": [1, 2], "same": {"k": 1}, "again": {"k": 1}}
    assert located.lines[("again", "k")] == 3  # an alias's keys are where the anchor's are


# ------------------------------------------------------------------------------------------------------ tags
@pytest.mark.parametrize(
    "value, tag",
    [
        ("!!python/name:os.system", "!!python/name:os.system"),
        ("!!python/object/apply:os.system [echo hi]", "!!python/object/apply:os.system"),
        ("!!python/object:collections.OrderedDict {}", "!!python/object:collections.OrderedDict"),
        ("!custom 3", "!custom"),
        ("!!binary aGVsbG8=", "!!binary"),
        ("!!set {a, b}", "!!set"),
        ("!!omap [a: 1]", "!!omap"),
    ],
)
def test_a_tag_outside_plain_data_is_one_line_naming_file_and_line(tmp_path, value, tag):
    path = write(tmp_path, GOOD + f"description: {value}\n")
    refused(lambda: load_recipe(str(path)), f"{path}:3", f"unsupported YAML tag '{tag}'")
    refused(lambda: parse_override(f"description={value}"), "command line", f"unsupported YAML tag '{tag}'")


def test_a_merge_key_is_one_line(tmp_path):
    path = write(tmp_path, GOOD + "base: &b {limit: 3}\nanswer:\n  <<: *b\n")
    refused(lambda: load_recipe(str(path)), f"{path}:5", "'!!merge'")


def test_explicit_standard_tags_are_plain_data():
    located = parse_yaml("a: !!str 3\nb: !!int '4'\nc: !!float 1\nd: !!bool true\ne: !!null ''\n", "r.yaml")
    assert located.data == {"a": "3", "b": 4, "c": 1.0, "d": True, "e": None}


# -------------------------------------------------------------------------------------------------------- sizes
def test_a_ten_megabyte_file_is_refused_before_it_is_parsed(tmp_path):
    path = write(tmp_path, GOOD + "description: " + "a" * 10_000_000 + "\n")
    refused(lambda: load_recipe(str(path)), str(path), f"larger than {MAX_RECIPE_BYTES} bytes")


def test_a_long_value_is_refused_naming_its_line(tmp_path):
    path = write(tmp_path, GOOD + "description: '" + "a" * (MAX_SCALAR_CHARS + 1) + "'\n")
    refused(lambda: load_recipe(str(path)), f"{path}:3", f"at most {MAX_SCALAR_CHARS}")


def test_a_long_override_is_refused_without_echoing_it():
    message = refused(
        lambda: parse_override("description=" + "a" * 10_000_000), "command line", f"at most {MAX_OVERRIDE_CHARS}"
    )
    assert len(message) < 200


def test_too_many_values_are_refused(tmp_path):
    text = "x: [" + ",".join(["1"] * 120_000) + "]\n"
    assert len(text) < MAX_RECIPE_BYTES
    refused(lambda: parse_yaml(text, "r.yaml"), "r.yaml:1", "more than")


def test_deep_nesting_is_one_line():
    refused(lambda: parse_yaml("a: " + "[" * 100_000 + "]" * 100_000 + "\n", "r.yaml"), "r.yaml")
    refused(lambda: parse_yaml("a: " + "[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2) + "\n", "r.yaml"), "r.yaml:1")


# --------------------------------------------------------------------------------- other errors: one line each
@pytest.mark.parametrize(
    "text, expected",
    [
        ("name: x\nstages: [a\n", "malformed YAML"),
        ("name: x\n---\nname: y\n", "r.yaml:2: malformed YAML"),
        ("name: x\ndate: 2024-13-45\n", "r.yaml:2: cannot read value '2024-13-45'"),
        ("name: x\nn: " + "9" * 5000 + "\n", "r.yaml:2: cannot read value"),
        ("? [a, b]\n: 1\n", "r.yaml:1: a key must be a plain value"),
        ("name: x\nname: y\n", "r.yaml:2: duplicate key 'name'"),
        ("name: 'a\n", "malformed YAML"),
        ("\t- a\n", "malformed YAML"),
    ],
)
def test_every_yaml_error_is_one_line(text, expected):
    refused(lambda: parse_yaml(text, "r.yaml"), expected)


def test_a_key_with_a_line_break_is_shown_on_one_line(tmp_path):
    path = write(tmp_path, GOOD + '"a\\nb": 1\n')
    refused(lambda: load_recipe(str(path)), "unknown key 'a\\nb'")


def test_an_override_that_is_not_yaml_is_its_text():
    assert parse_override("description=a: b: c") == (("description",), "a: b: c")
    assert parse_override("a=[1, 2]") == (("a",), [1, 2])


# -------------------------------------------------------------------------------------------------------- CLI
def wb(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True, timeout=300)


def assert_one_line_error(out: subprocess.CompletedProcess, expected: str) -> None:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, out.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], out.stderr
    assert "Traceback" not in out.stderr + out.stdout


@pytest.mark.parametrize(
    "text, expected",
    [
        (GOOD + billion_laughs(), "aliases are expanded"),
        (GOOD + "description: !!python/name:os.system\n", "r.yaml:3: unsupported YAML tag '!!python/name:os.system'"),
        (GOOD + "description: " + "a" * 10_000_000 + "\n", "too large for a recipe"),
        (GOOD + "a: &a [*a]\n", "contains itself"),
    ],
    ids=["bomb", "python-tag", "ten-megabytes", "self-alias"],
)
def test_validate_and_run_print_one_line(tmp_path, text, expected):
    path = write(tmp_path, text)
    for command in ("validate", "run"):
        assert_one_line_error(wb(command, str(path)), expected)


def test_a_bomb_in_an_override_is_one_line_from_the_cli(tmp_path):
    out = wb("validate", str(write(tmp_path, GOOD)), "description=" + flow(billion_laughs()))
    assert_one_line_error(out, "error: command line: more than")
