"""The export and bench_runtime settings are checked when a recipe loads, not after the stages before them ran."""

from __future__ import annotations

import pytest

from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ('export.version="1.2"', r"command line: export\.version: '1\.2' is not a semantic version"),
        ("export.name=../escape", "not a bundle name"),
        ("export.methods=[oracle]", r"\['oracle'\]: give methods of no_rag, .* \(gold-free\)"),
        ("export.methods=[]", "none"),
    ],
)
def test_bad_export_settings_fail_at_load(override, message):
    with pytest.raises(ConfigError, match=message):
        load_recipe("quickstart", [override])


def test_bad_bench_runtime_settings_fail_at_load():
    with pytest.raises(ConfigError, match=r"bench_runtime\.serve_requests: must be >= 1"):
        load_recipe("bench-runtime", ["bench_runtime.serve_requests=0"])
    with pytest.raises(ConfigError, match="unknown method"):
        load_recipe("bench-runtime", ["bench_runtime.serve_method=nope"])


def test_the_built_in_recipes_pass():
    assert "export" in load_recipe("quickstart").config.stages
    assert load_recipe("bench-runtime").config.bench_runtime.serve_concurrency == [1, 8, 32]
