"""Model records: a local directory's weight digest, and a hub id pinned to the revision of its cached snapshot."""

from __future__ import annotations

from pathlib import Path

from workbench.assets import ResolvedModel, model_weights, weights_digest


def test_local_weights_digest_follows_the_files(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"abc")
    (tmp_path / "config.json").write_text("{}")  # not a weight file
    first = weights_digest(tmp_path)
    (tmp_path / "config.json").write_text('{"x": 1}')
    assert weights_digest(tmp_path) == first
    (tmp_path / "model.safetensors").write_bytes(b"abd")
    assert weights_digest(tmp_path) != first
    assert weights_digest(tmp_path / "missing") is None


def test_a_hub_id_is_pinned_to_its_cached_snapshot(tmp_path, monkeypatch):
    import huggingface_hub

    snapshot = tmp_path / "models--org--name" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").write_bytes(b"weights")
    calls = []

    def fake_download(repo_id, local_files_only=False, **kwargs):
        calls.append((repo_id, local_files_only))
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    record = model_weights(ResolvedModel("org/name", "org/name", "f", "hub"))
    assert record == {"weights_sha256": weights_digest(snapshot), "revision": "0123abcd"}
    assert calls == [("org/name", True)]  # never a download

    def not_cached(repo_id, local_files_only=False, **kwargs):
        raise FileNotFoundError(repo_id)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", not_cached)
    assert model_weights(ResolvedModel("org/name", "org/name", "f", "hub")) == {
        "weights_sha256": None,
        "revision": None,
    }
    assert model_weights(ResolvedModel("x", str(Path(snapshot)), "f", "local"))["revision"] is None
