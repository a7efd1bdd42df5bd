"""Every built-in recipe validates, and every key in it carries a comment (recipes document themselves)."""

from __future__ import annotations

import pytest

from workbench.recipe import builtin_recipes, load_recipe

RECIPES = builtin_recipes()


def test_there_is_a_quickstart():
    assert "quickstart" in RECIPES


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_builtin_recipe_validates(name):
    loaded = load_recipe(name)
    assert loaded.config.name == name


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_key_line_is_commented(name):
    for number, line in enumerate(RECIPES[name].read_text().splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith(":"):  # a section header: its keys carry the comments
            continue
        assert "#" in stripped, f"{name}.yaml:{number} has no comment: {line!r}"


def test_the_quickstart_study_only_replays_and_feeds_evaluate_and_export():
    """The quickstart's short study must stay cheap (every parameter a replayable threshold, so trials generate
    nothing) and run before evaluate and export, which read its chosen parameters."""
    from workbench.tuning.space import parse_spaces

    config = load_recipe("quickstart").config
    stages = list(config.stages)
    assert stages.index("study") < stages.index("evaluate") < stages.index("export")
    specs = parse_spaces(config.study.methods, config.study.space, "study.space")
    assert specs and all(spec.threshold for method in specs for spec in specs[method])
