"""generator.prompt_format in recipes: validated when the recipe loads, and in stage keys only when not `auto` (so
adding the setting left every cached stage valid)."""

from __future__ import annotations

import pytest

from workbench.core.config import to_plain
from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe
from workbench.stages import runner
from workbench.stages.registry import STAGES


def test_unknown_prompt_format_is_refused_naming_the_key():
    with pytest.raises(ConfigError) as err:
        load_recipe("quickstart", ["generator.prompt_format=base"])
    assert "generator.prompt_format" in str(err.value) and "'auto' | 'chat' | 'completion'" in str(err.value)
    assert load_recipe("quickstart", ["generator.prompt_format=completion"]).config.generator.prompt_format == (
        "completion"
    )
    assert load_recipe("quickstart").config.generator.prompt_format == "auto"  # the default


def _answer_key(config) -> str:
    spec = STAGES["answer"]
    assert "generator" in spec.sections
    return runner.stage_key(spec, config, {"build_data": "b"})


def test_auto_keeps_the_stage_key_of_a_config_without_the_setting(monkeypatch):
    config = load_recipe("quickstart").config
    key_auto = _answer_key(config)

    def without_setting(obj):
        plain = to_plain(obj)
        if isinstance(plain, dict) and "generator" in plain:
            del plain["generator"]["prompt_format"]
        return plain

    monkeypatch.setattr(runner, "to_plain", without_setting)
    assert _answer_key(config) == key_auto


def test_an_explicit_format_changes_the_stage_key():
    keys = {fmt: _answer_key(load_recipe("quickstart", [f"generator.prompt_format={fmt}"]).config)
            for fmt in ("auto", "chat", "completion")}  # fmt: skip
    assert len(set(keys.values())) == 3
