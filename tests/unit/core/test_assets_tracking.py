"""Asset resolution (no hub-id fallback, clear errors) and the tracker factory."""

from __future__ import annotations

import pytest

from workbench.assets import asset_report, resolve_embedder, resolve_generator, wiki_summaries_path
from workbench.core.errors import AssetError
from workbench.core.tracking import NullTracker, make_tracker


def test_local_directory_resolves_with_a_fingerprint(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    resolved = resolve_generator(str(tmp_path))
    assert resolved.source == "local" and resolved.path == str(tmp_path.resolve())
    (tmp_path / "model.safetensors").write_text("x")
    assert resolve_generator(str(tmp_path)).fingerprint != resolved.fingerprint


def test_missing_path_is_a_one_line_error(tmp_path):
    with pytest.raises(AssetError, match="no such generator") as err:
        resolve_generator(str(tmp_path / "nope"))
    assert "\n" not in str(err.value)


def test_hub_id_is_refused_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(AssetError, match="HF_HUB_OFFLINE=1"):
        resolve_embedder("someorg/some-model")


def test_embedded_assets_are_found_without_loading():
    rows = {row["asset"]: row for row in asset_report()}
    assert set(rows) == {"smollm2", "minilm", "wiki", "gemma3", "smollm2-reader"}
    assert all(row["status"] == "ok" for row in rows.values() if not row["optional"])
    assert [name for name, row in rows.items() if row["optional"]] == ["gemma3"]
    assert resolve_embedder("minilm").source == "embedded:minilm"
    assert wiki_summaries_path().name == "summaries_en-us.json"


def test_tracker_none_and_disabled(tmp_path, monkeypatch):
    assert isinstance(make_tracker("none", tmp_path, "x", {}), NullTracker)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert isinstance(make_tracker("wandb", tmp_path, "x", {}), NullTracker)


def test_wandb_offline_writes_under_the_run_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = make_tracker("wandb", tmp_path, "unit", {"a": 1})
    assert tracker.kind == "wandb"
    tracker.log({"stage/metric": 0.5, "skipped": "text"})
    tracker.finish()
    assert list((tmp_path / "wandb").glob("offline-run-*")), "no offline run directory written"
