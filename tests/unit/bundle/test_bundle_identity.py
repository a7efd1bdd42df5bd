"""Issue 41: a bundle's ``name`` and ``version`` were outside the content digest, so two edits made the tiny bundle load
as ``official-prod 9.9.9``. Since schema 1.3 the ``identity`` block repeats them inside the digest and the loader
refuses a manifest whose name or version is not its identity's; an older bundle (the committed 1.0 fixture) still
loads, with a note that nothing verifies its name and version."""

from __future__ import annotations

import json

import pytest

from tests.unit.bundle.test_bundle_attacks import _manifest, _reseal
from workbench.bundle.manifest import seal
from workbench.bundle.schema import SCHEMA_VERSION
from workbench.core.errors import DataError
from workbench.runtime import load_bundle


@pytest.fixture
def sealed(bundle):
    """The fixture as this workbench exports it: schema 1.3, ``identity`` set, the digest over it."""
    manifest = _manifest(bundle)
    manifest["schema_version"] = SCHEMA_VERSION
    _reseal(bundle, manifest)  # the file table
    (bundle / "manifest.json").write_text(json.dumps(seal(manifest, manifest["files"])))
    return bundle


def test_a_sealed_bundle_loads_without_a_note(sealed):
    runtime = load_bundle(sealed)
    assert (runtime.name, runtime.version) == ("tiny", "1.0.0")
    assert not any("name and version" in note for note in runtime.notes)


@pytest.mark.parametrize("rehash", [False, True], ids=["edited", "edited-and-rehashed"])
def test_a_renamed_or_re_versioned_bundle_is_refused(sealed, rehash):
    manifest = _manifest(sealed)
    manifest.update(name="official-prod", version="9.9.9")
    if rehash:
        _reseal(sealed, manifest)  # the digest recomputed, the sealed identity left as exported
    else:
        (sealed / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"'name' differs from 'identity\.name', which the content digest covers"):
        load_bundle(sealed)


def test_editing_the_identity_too_without_rehashing_is_refused(sealed):
    manifest = _manifest(sealed)
    manifest.update(name="official-prod", version="9.9.9", identity={"name": "official-prod", "version": "9.9.9"})
    (sealed / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="content_sha256 does not match"):
        load_bundle(sealed)


def test_a_current_schema_without_an_identity_is_refused(sealed):
    manifest = _manifest(sealed)
    del manifest["identity"]
    _reseal(sealed, manifest)
    with pytest.raises(DataError, match=r"missing 'identity' \(required since schema 1\.3\)"):
        load_bundle(sealed)


def test_an_older_bundle_loads_with_a_note_that_its_name_is_unverified(bundle):
    runtime = load_bundle(bundle)
    assert runtime.manifest["schema_version"] == "1.0"
    assert any("name and version are not covered by the content digest (schema 1.0" in n for n in runtime.notes)
