"""Feature plugins through the ``workbench.features`` entry point: resolution by name, the contract checks (a broken
plugin is one ConfigError naming its entry point), derived stats in the stats graph's bookkeeping, the bundle-load
check of a recorded plugin feature, and lazy loading (built-in names never read the installed packages' metadata)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.feature_plugins import TOY_FEATURE, TOY_NAME, installed, write_plugin
from workbench.core.errors import ConfigError, DataError
from workbench.uncertainty.features import check_recorded_features, compute_features, get_features, required_stats
from workbench.uncertainty.stat_costs import feature_components
from workbench.uncertainty.stat_prompts import prompt_groups

GOOD = """
from dataclasses import dataclass
from workbench.uncertainty.features.base import Feature
from workbench.uncertainty.stats import DerivedStat

@dataclass(frozen=True)
class Plugin(Feature):
    name = "{name}"
    category = "{category}"
    orientation = {orientation}
    stats = {stats}
    derived_stats = {derived}

    def raw(self, stats):
        return 1.0
"""


def plugin(tmp_path: Path, entry: str = "bad_one", **fields: str) -> Path:
    """A package declaring ``entry = bad_plugin:Plugin``, a feature built from :data:`GOOD` (named ``entry``) with
    ``fields`` changed."""
    values = {"name": entry, "category": "other", "orientation": "-1", "stats": '("greedy_logprobs",)', "derived": "()"}
    values.update(fields)
    return write_plugin(tmp_path / "pkg", f"{entry} = bad_plugin:Plugin", GOOD.format(**values))


def test_a_plugin_feature_resolves_by_name_with_its_derived_stat():
    with installed(TOY_FEATURE):
        (feature,) = get_features([TOY_NAME])
        assert required_stats([TOY_NAME]) == {"toy_min_logprob"}
        stats = {"toy_min_logprob": -2.5}
        assert compute_features(stats, [TOY_NAME]) == {TOY_NAME: -2.5}  # −(NLL 2.5): higher = more certain
        assert feature.describe()["package"] == {"name": "toy-feature", "version": "0.1"}
        # a derived stat costs and reads the prompts of the stats it is derived from
        assert feature_components([TOY_NAME]) == frozenset({"greedy"})
        assert prompt_groups({"toy_min_logprob"}) == ["answer"]
    with pytest.raises(ConfigError, match="unknown feature"):
        get_features([TOY_NAME])  # uninstalled again: the registry forgot it


def test_unknown_names_list_the_installed_plugins():
    with installed(TOY_FEATURE), pytest.raises(ConfigError) as caught:
        get_features(["entropy", "no_such_feature"])
    assert "['no_such_feature']" in str(caught.value) and f"installed plugins: ['{TOY_NAME}']" in str(caught.value)


@pytest.mark.parametrize(
    ("fields", "module", "expected"),
    [
        ({}, "import not_a_module_anywhere\n", "failed to load (ModuleNotFoundError"),
        ({}, "Plugin = 42\n", "names a int, not a Feature"),
        ({"name": "other_name"}, None, "calls itself 'other_name'"),
        ({"orientation": "2"}, None, "orientation must be +1 or -1"),
        ({"category": "vibes"}, None, "category must be one of"),
        ({"stats": '("no_such_stat",)'}, None, "needs stat(s) ['no_such_stat']"),
        (
            {"stats": '("greedy_text",)', "derived": '(DerivedStat("greedy_text", ("greedy_eos",), len),)'},
            None,
            "is already defined",
        ),
        (
            {"stats": '("toy_x",)', "derived": '(DerivedStat("toy_x", ("nope",), len),)'},
            None,
            "needs unknown stat(s) ['nope']",
        ),
    ],
)
def test_a_broken_plugin_is_one_config_error_naming_its_entry_point(tmp_path, fields, module, expected):
    root = plugin(tmp_path, **fields)
    if module is not None:
        (root / "bad_plugin.py").write_text(module)
    with installed(root), pytest.raises(ConfigError) as caught:
        get_features(["bad_one"])
    message = str(caught.value)
    assert "\n" not in message and expected in message
    assert "entry point 'bad_one = bad_plugin:Plugin' (workbench.features, package bad-plugin 0.1)" in message


def test_two_packages_declaring_one_name_are_refused(tmp_path):
    first = plugin(tmp_path / "a")
    second = write_plugin(tmp_path / "b", "bad_one = bad_plugin:Plugin", "", package="other-plugin")
    with installed(first, second), pytest.raises(ConfigError, match=r"declared by several packages: \['bad-plugin', "):
        get_features(["bad_one"])


def test_a_plugin_cannot_shadow_a_built_in_feature(tmp_path):
    root = plugin(tmp_path, entry="entropy")
    with installed(root):
        (feature,) = get_features(["entropy"])
    assert type(feature).__module__ == "workbench.uncertainty.features.probability"


RECORD = {"name": TOY_NAME, "version": "1", "package": {"name": "toy-feature", "version": "0.1"}}


def test_a_recorded_plugin_feature_loads_only_when_installed_at_its_version():
    check_recorded_features([{"name": "entropy", "version": "1"}], "manifest.json")  # built in: passes
    with pytest.raises(DataError, match=r"'toy_min_token_nll' comes from the package toy-feature 0.1, which is not "):
        check_recorded_features([RECORD], "manifest.json")
    with installed(TOY_FEATURE):
        check_recorded_features([RECORD], "manifest.json")
        with pytest.raises(
            DataError, match=r"version 7 in the bundle .* version 1 in the installed package toy-feature"
        ):
            check_recorded_features([{**RECORD, "version": "7"}], "manifest.json")
        with pytest.raises(
            DataError, match="comes from the package toy-feature here, but the bundle took it from other"
        ):
            check_recorded_features([{**RECORD, "package": {"name": "other", "version": "0.1"}}], "manifest.json")
        check_recorded_features([{**RECORD, "package": {"name": "Toy_Feature", "version": "0.2"}}], "manifest.json")
    with pytest.raises(DataError, match="'entropy' is built in here, but the bundle took it from the package"):
        check_recorded_features([{**RECORD, "name": "entropy"}], "manifest.json")


def test_a_crafted_record_is_not_echoed():
    crafted = {"name": "x\u202e; rm -rf", "version": "1", "package": {"name": "evil\nname", "version": "0.1"}}
    with pytest.raises(DataError) as caught:
        check_recorded_features([crafted], "manifest.json")
    message = str(caught.value)
    assert "(an invalid name)" in message and "(an invalid package name)" in message and "rm -rf" not in message


def test_built_in_names_never_read_the_entry_points(monkeypatch):
    from workbench.recipe import load_recipe
    from workbench.uncertainty.features import plugins

    def scan():
        raise AssertionError("the installed packages' entry points were read for built-in feature names")

    monkeypatch.setattr(plugins, "_entry_points", scan)
    load_recipe("quickstart", ["collect.features=[entropy,dtr_nll,ptrue]"])
    assert [f.name for f in get_features(["entropy", "dtr_nll"])] == ["entropy", "dtr_nll"]
    with pytest.raises(AssertionError, match="entry points were read"):
        get_features(["not_built_in"])  # the check above can fail: an unknown name does read them


def test_the_guide_shows_the_toy_package_as_it_is():
    """docs/adding-a-feature.md quotes the toy package's entry point and class declarations: they must be its own."""
    guide = (Path(__file__).resolve().parents[3] / "docs" / "adding-a-feature.md").read_text()
    entry = "toy_min_token_nll = toy_feature:MinTokenNll"
    assert entry in (TOY_FEATURE / "toy_feature-0.1.dist-info" / "entry_points.txt").read_text()
    assert 'toy_min_token_nll = "toy_feature:MinTokenNll"' in guide
    assert 'toy_min_token_nll = "toy_feature:MinTokenNll"' in (TOY_FEATURE / "pyproject.toml").read_text()
    source = (TOY_FEATURE / "toy_feature" / "__init__.py").read_text()
    for line in ('name = "toy_min_token_nll"', 'version = "1"', "orientation = -1", 'stats = ("toy_min_logprob",)'):
        assert line in guide and line in source


def test_a_plugin_upgrade_changes_the_collect_stage_key(monkeypatch):
    from workbench.recipe import load_recipe
    from workbench.stages import runner
    from workbench.stages.registry import STAGES
    from workbench.stages.runner import stage_key
    from workbench.uncertainty.features import plugin_versions

    monkeypatch.setattr(runner, "asset_fingerprint", lambda kind, config: kind)  # no model is resolved here
    with installed(TOY_FEATURE):
        config = load_recipe("quickstart", [f"collect.features=[confidence,{TOY_NAME}]"]).config
        inputs = {name: "input-key" for name in STAGES["collect"].inputs_in(config.stages)}
        before = stage_key(STAGES["collect"], config, inputs)
        assert plugin_versions(["confidence", TOY_NAME]) == {
            TOY_NAME: {"package": "toy-feature", "package_version": "0.1", "version": "1"}
        }
        (feature,) = get_features([TOY_NAME])
        monkeypatch.setattr(type(feature), "version", "2")
        assert stage_key(STAGES["collect"], config, inputs) != before
        monkeypatch.setattr(type(feature), "version", "1")
        assert stage_key(STAGES["collect"], config, inputs) == before
    assert plugin_versions(["confidence", "entropy"]) == {}
