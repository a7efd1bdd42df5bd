"""docs/adding-a-method.md, proven: a method package outside ``workbench/`` (``tests/fixtures/plugins/toy_method``),
registered only through the ``workbench.methods`` entry point of its ``*.dist-info``, is evaluated, studied (its
``min_words`` in its own study space), exported and answered from its bundle — touching no file of the workbench.
A bundle naming a method that is not installed is refused in one line naming the method and the package; a broken
plugin is one line naming its entry point."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from workbench.core.errors import ConfigError
from workbench.methods import registry

PLUGINS = Path(__file__).resolve().parents[2] / "fixtures" / "plugins"


def _forget_plugin() -> None:
    for name in [m for m in sys.modules if m == "toy_method" or m.startswith("toy_method.")]:
        del sys.modules[name]


@pytest.fixture
def toy_plugin(monkeypatch):
    """The toy method's directory on sys.path (as if pip-installed) and the registry rebuilt; undone after."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    registry.refresh()
    yield
    monkeypatch.undo()
    _forget_plugin()
    registry.refresh()


def test_the_entry_point_adds_the_method_to_the_one_table(toy_plugin):
    spec = registry.METHOD_TABLE["toy_words"]
    assert registry.METHODS[-1] == "toy_words" and spec.package == "toy-method"
    assert "toy_method.method" not in sys.modules  # the implementation is imported only when built
    assert registry.default_method(["no_rag", "toy_words"]) == "no_rag"  # rank 0: the first among equals
    assert registry.configure("toy_words", {"min_words": 3}).settings.min_words == 3
    with pytest.raises(ConfigError) as bad:
        registry.check_options(["toy_words"], {"toy_words": {"min_words": 0}})
    assert bad.value.where == "evaluate.options.toy_words.min_words"
    from workbench.tuning.space import parse_spaces

    (param,) = parse_spaces(["toy_words"], {}, "study.space")["toy_words"]
    assert (param.name, param.kind, param.low, param.high) == ("min_words", "int", 2, 12)
    assert "# toy_words:" in registry.options_template()


def test_without_the_plugin_the_method_is_unknown():
    assert "toy_words" not in registry.METHOD_TABLE
    with pytest.raises(ConfigError, match="unknown method 'toy_words'"):
        registry.method_spec("toy_words")


def test_a_broken_plugin_is_one_line_naming_its_entry_point(tmp_path, monkeypatch):
    info = tmp_path / "broken_method-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-method\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[workbench.methods]\nbroken = broken_method_missing_module\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(ConfigError) as bad:
            registry.refresh()
        assert bad.value.where == "entry point workbench.methods:broken"
        assert "broken_method_missing_module failed to load (ModuleNotFoundError)" in str(bad.value)
        assert "\n" not in str(bad.value)
    finally:
        monkeypatch.undo()
        registry.refresh()


def _overrides(tmp: Path, lm_dir: Path, encoder_dir: Path) -> list[str]:
    """The tiny run of tests/bundle_run.py, with the toy method studied, evaluated and exported."""
    from tests.bundle_run import run_overrides

    return run_overrides(
        tmp,
        lm_dir,
        encoder_dir,
        "stages=[build_data,study,evaluate,export]",
        "export.name=toy",
        "evaluate.methods=[no_rag,toy_words]",
        "evaluate.options={toy_words: {min_words: 5}}",
        "study.methods=[toy_words]",
        "study.space={}",
        "study.limit=3",
        "study.n_trials=3",
    )


def test_the_toy_method_runs_evaluate_study_export_and_infer(toy_plugin, tmp_path, tiny_lm_long_dir, tiny_encoder_dir):
    from workbench.recipe import load_recipe
    from workbench.runtime import load_bundle
    from workbench.stages.runner import run_recipe

    result = run_recipe(load_recipe("quickstart", _overrides(tmp_path, tiny_lm_long_dir, tiny_encoder_dir)))
    stages = result.run_dir / "stages"
    traces = json.loads((stages / "evaluate" / "summary.json").read_text())
    assert "toy_words" in json.dumps(traces)
    studied = json.loads((stages / "study" / "params" / "toy_words.json").read_text())
    assert 2 <= studied["options"]["min_words"] <= 12  # drawn from the toy method's own study space
    bundle = next((tmp_path / "bundles" / "toy").glob("1.*"))
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["methods"]["toy_words"]["package"] == "toy-method"
    assert manifest["methods"]["toy_words"]["options"]["min_words"] == studied["options"]["min_words"]
    runtime = load_bundle(bundle, {"allow_model_mismatch": True})
    assert runtime.method().name == "no_rag"  # rank 0 everywhere: the bundle's first method
    answer = runtime.answer("one two three four five six seven eight nine ten eleven twelve thirteen", "toy_words")
    step = answer.trace["steps"][0]
    assert step["detail"]["retrieve"] is True and step["detail"]["words"] == 13

    # the same bundle where the plugin is not installed: refused at load, naming the method and its package
    _forget_plugin()
    sys.path.remove(str(PLUGINS))
    registry.refresh()
    with pytest.raises(ConfigError) as refused:
        load_bundle(bundle, {"allow_model_mismatch": True})
    assert str(refused.value).count("\n") == 0
    assert "method 'toy_words'" in str(refused.value) and "'toy-method'" in str(refused.value)
