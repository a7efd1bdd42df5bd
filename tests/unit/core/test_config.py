"""Recipe parsing and validation: errors name the key, the file and the line."""

from __future__ import annotations

import pytest

from workbench.core.config import apply_overrides, parse_override, parse_yaml
from workbench.core.errors import ConfigError
from workbench.recipe import RecipeConfig, load_recipe, recipe_template

GOOD = """\
name: demo
stages: [build_data]
seed: 3
answer:
  limit: 10
  modes: [rag]
"""


def write(tmp_path, text, name="r.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_valid_recipe_fills_defaults(tmp_path):
    loaded = load_recipe(str(write(tmp_path, GOOD)))
    cfg = loaded.config
    assert isinstance(cfg, RecipeConfig)
    assert cfg.seed == 3 and cfg.answer.limit == 10 and cfg.answer.modes == ["rag"]
    assert cfg.generator.model == "smollm2" and cfg.retrieval.k == 5


def test_unknown_key_names_key_file_and_line(tmp_path):
    path = write(tmp_path, GOOD + "retrieval:\n  kk: 3\n")
    with pytest.raises(ConfigError) as err:
        load_recipe(str(path))
    message = str(err.value)
    assert "retrieval.kk" in message and f"{path}:8" in message and "known here" in message


def test_wrong_type_names_key_and_line(tmp_path):
    path = write(tmp_path, GOOD.replace("limit: 10", "limit: ten"))
    with pytest.raises(ConfigError, match=r"r\.yaml:5: 'answer\.limit' expects int \| null, got 'ten'"):
        load_recipe(str(path))


def test_bool_is_not_an_int(tmp_path):
    with pytest.raises(ConfigError, match="'seed' expects int"):
        load_recipe(str(write(tmp_path, GOOD.replace("seed: 3", "seed: true"))))


def test_literal_choices_are_enforced(tmp_path):
    with pytest.raises(ConfigError, match=r"'answer\.modes' expects list\['closed_book' \| 'rag' \| 'gold'\]"):
        load_recipe(str(write(tmp_path, GOOD.replace("[rag]", "[web]"))))


def test_missing_required_key(tmp_path):
    with pytest.raises(ConfigError, match="missing required key 'stages'"):
        load_recipe(str(write(tmp_path, "name: x\n")))


def test_malformed_yaml_reports_line(tmp_path):
    path = write(tmp_path, "name: x\nstages: [a\nseed: 1\n")
    with pytest.raises(ConfigError, match=r"r\.yaml:\d+: malformed YAML"):
        load_recipe(str(path))


def test_duplicate_key_is_an_error():
    with pytest.raises(ConfigError, match=r"src:2: duplicate key 'a'"):
        parse_yaml("a: 1\na: 2\n", "src")


def test_unknown_stage_and_order(tmp_path):
    with pytest.raises(ConfigError, match="unknown stage 'collectt'"):
        load_recipe(str(write(tmp_path, GOOD.replace("[build_data]", "[build_data, collectt]"))))
    with pytest.raises(ConfigError, match="'answer' needs build_data"):
        load_recipe(str(write(tmp_path, GOOD.replace("[build_data]", "[answer]"))))


def test_unknown_recipe_name_lists_builtins():
    with pytest.raises(ConfigError, match=r"unknown recipe 'nope'.*quickstart"):
        load_recipe("nope")


def test_overrides_apply_and_are_validated(tmp_path):
    path = str(write(tmp_path, GOOD))
    cfg = load_recipe(path, ["answer.limit=3", "retrieval.backend=dense", "data.ood_topics=[Arts, Science]"]).config
    assert cfg.answer.limit == 3 and cfg.retrieval.backend == "dense" and cfg.data.ood_topics == ["Arts", "Science"]
    with pytest.raises(ConfigError, match=r"command line: unknown key 'answer\.limt'"):
        load_recipe(path, ["answer.limt=3"])
    with pytest.raises(ConfigError, match="not of the form key=value"):
        load_recipe(path, ["answer.limit"])


def test_a_loaded_recipe_gives_the_command_that_loads_it_again(tmp_path):
    loaded = load_recipe("quickstart", ["answer.limit=3", "data.templates=[cloze, description]"])
    assert loaded.command == "workbench run quickstart answer.limit=3 'data.templates=[cloze, description]'"
    path = write(tmp_path, GOOD)
    assert load_recipe(str(path)).command == f"workbench run {path}"
    again = load_recipe(*_split_command(loaded.command))
    assert again.config == loaded.config


def _split_command(command: str) -> tuple[str, list[str]]:
    import shlex

    _, _, recipe, *overrides = shlex.split(command)
    return recipe, overrides


def test_override_into_a_scalar_is_rejected():
    located = parse_yaml("seed: 1\n", "x")
    with pytest.raises(ConfigError, match="'seed' is not a section"):
        apply_overrides(located, ["seed.x=1"])


def test_parse_override_reads_yaml_values():
    assert parse_override("a.b=3") == (("a", "b"), 3)
    assert parse_override("a=null") == (("a",), None)
    assert parse_override("a=[1, 2]") == (("a",), [1, 2])
    assert parse_override("a=hello") == (("a",), "hello")


def test_template_documents_every_key():
    template = recipe_template()
    for line in template.splitlines():
        assert "#" in line, line
    assert "answer:" in template and "limit: 50" in template and "REQUIRED" in template
