"""A bundle's method options are validated once when it is opened (issue 44: typed settings without re-validation):
the manifest check at open, then the runtime's typed configuration, which lays the caller's overrides over them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import workbench.methods.registry as registry
from workbench.core.errors import DataError
from workbench.runtime import load_bundle

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "bundles" / "tiny" / "1.0.0"


@pytest.fixture
def configured(monkeypatch):
    """The name of every method :func:`workbench.methods.registry.configure` validated, in order."""
    seen: list[str] = []
    configure = registry.configure

    def counted(name, given, where="evaluate.methods"):
        seen.append(name)
        return configure(name, given, where)

    monkeypatch.setattr(registry, "configure", counted)
    return seen


def test_loading_a_bundle_validates_each_methods_options_twice_not_three_times(configured):
    runtime = load_bundle(FIXTURE)
    methods = list(json.loads((FIXTURE / "manifest.json").read_text())["methods"])
    # once by parse_manifest (a bad bundle refused before anything is read), once by the runtime (overrides laid
    # over: the typed configs it builds with); manifest_notes no longer checks them a third time
    assert sorted(configured) == sorted(methods * 2)
    assert set(runtime.method_configs) == set(methods)


def test_a_bad_option_is_still_refused_when_the_bundle_is_opened(tmp_path):
    import shutil

    bundle = tmp_path / "b"
    shutil.copytree(FIXTURE, bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    name = next(iter(manifest["methods"]))
    manifest["methods"][name].setdefault("options", {})["no_such_option"] = 1
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=rf"methods\.{name}\.options"):
        load_bundle(bundle)
