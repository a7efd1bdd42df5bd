"""Adding a stage is its own module plus one entry of the stage table: the toy stage (``toy_stage.py``) registered by
one ``StageSpec`` loads in a recipe (its section validated with file:line errors, its check run), runs and is cached,
and ``workbench config toy`` prints its keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench.cli import app
from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe, recipe_template
from workbench.stages import registry
from workbench.stages.registry import StageSpec
from workbench.stages.runner import run_recipe

MODULE = "tests.unit.stages.toy_stage"
TOY = StageSpec(
    "toy",
    "write a greeting",
    f"{MODULE}:run",
    sections=("toy",),
    settings=f"{MODULE}:ToySection",
    check=f"{MODULE}:check",
)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage table with the toy stage's one entry."""
    monkeypatch.setitem(registry.STAGES, "toy", TOY)


def write_recipe(tmp_path: Path, section: str = "toy:\n  greeting: hi\n  repeats: 3\n") -> Path:
    """A recipe running only the toy stage, its run directory under ``tmp_path``."""
    path = tmp_path / "toy.yaml"
    path.write_text(f"name: toy\nstages: [toy]\ntracker: none\nrun_dir: {tmp_path / 'run'}\n{section}")
    return path


def test_a_recipe_with_the_toy_section_loads_runs_and_is_cached(tmp_path, toy):
    loaded = load_recipe(str(write_recipe(tmp_path)))
    assert (loaded.config.toy.greeting, loaded.config.toy.repeats) == ("hi", 3)
    first = run_recipe(loaded)
    assert (first.run_dir / "stages" / "toy" / "toy.txt").read_text() == "hi hi hi"
    assert first.stage("toy").summary["words"] == 3 and not first.stage("toy").cached
    assert run_recipe(load_recipe(str(write_recipe(tmp_path)))).stage("toy").cached


def test_the_toy_section_has_its_defaults_and_refuses_unknown_keys_at_their_line(tmp_path, toy):
    assert load_recipe(str(write_recipe(tmp_path, ""))).config.toy.repeats == 2
    path = write_recipe(tmp_path, "toy:\n  greeting: hi\n  colour: red\n")
    with pytest.raises(ConfigError, match=rf"{path}:7: unknown key 'toy.colour'"):
        load_recipe(str(path))


def test_the_toy_stages_own_check_runs_at_load(tmp_path, toy):
    path = write_recipe(tmp_path, "toy:\n  greeting: two words\n")
    with pytest.raises(ConfigError, match=rf"{path}:6: toy.greeting: give one word"):
        load_recipe(str(path))


def test_workbench_config_toy_prints_its_keys(toy):
    shown = CliRunner().invoke(app, ["config", "toy"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines() == [
        "toy:  # the 'toy' stage",
        "  greeting: hello  # str — the word the stage writes",
        "  repeats: 2  # int — how many times it writes it",
    ]
    assert "toy:  # the 'toy' stage\n  greeting: hello" in recipe_template()


def test_without_its_entry_the_section_is_an_unknown_key(tmp_path):
    with pytest.raises(ConfigError, match="unknown key 'toy'"):
        load_recipe(str(write_recipe(tmp_path)))
    assert "toy:" not in recipe_template()


def test_an_unknown_stage_is_one_line_and_a_non_zero_exit():
    shown = CliRunner().invoke(app, ["config", "nope"])
    assert shown.exit_code != 0 and "unknown stage 'nope'" in str(shown.exception or shown.output)
