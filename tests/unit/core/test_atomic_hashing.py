"""Atomic writes never leave half-written output; hashes are stable."""

from __future__ import annotations

import pytest

from workbench.core.atomic import atomic_directory, atomic_write_json, atomic_write_text
from workbench.core.hashing import stable_hash, tree_fingerprint, tree_sha256


def test_atomic_text_replaces_and_leaves_no_temp(tmp_path):
    target = tmp_path / "a" / "f.txt"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two")
    assert target.read_text() == "two"
    assert [p.name for p in target.parent.iterdir()] == ["f.txt"]


def test_atomic_directory_failure_keeps_old_content(tmp_path):
    target = tmp_path / "out"
    with atomic_directory(target) as tmp:
        (tmp / "x").write_text("old")
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "x").write_text("new, half")
        raise RuntimeError("interrupted")
    assert (target / "x").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_atomic_directory_success_swaps(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "stale").write_text("s")
    with atomic_directory(target) as tmp:
        (tmp / "fresh").write_text("f")
    assert sorted(p.name for p in target.iterdir()) == ["fresh"]


def test_stable_hash_ignores_key_order_and_detects_changes():
    assert stable_hash({"a": 1, "b": [1, 2]}) == stable_hash({"b": [1, 2], "a": 1})
    assert stable_hash({"a": 1}) != stable_hash({"a": 2})


def test_tree_hashes(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    atomic_write_json(tmp_path / "j.json", {"k": 1})
    files = tree_sha256(tmp_path)
    assert set(files) == {"d/f", "j.json"}
    before = tree_fingerprint(tmp_path)
    (tmp_path / "d" / "f").write_text("y")
    assert tree_fingerprint(tmp_path) != before
