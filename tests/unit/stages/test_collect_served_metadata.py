"""A served collection's metadata.json lists each feature its server did not give exactly, why, and the rows of each
split holding NaN for it; a merge of shards keeps the list of every shard and counts over all their rows."""

from __future__ import annotations

import json
import math

from workbench.stages.collect.run import _write_outputs, merge_shards

WHY = {"ptrue": "NaN (absent) where a true / false option token is outside the server's top-k log-probs"}


def _rows(values: list[float], first: int = 0) -> list[dict]:
    return [
        {
            "position": first + i,
            "id": f"q{first + i}",
            "question": "q?",
            "answers": ["a"],
            "ptrue": value,
            "confidence": -0.5 - 0.1 * i,
            "correct_em": float(i % 2),
            "correct_contains": float(i % 2),
            "correct_f1": float(i % 2),
        }
        for i, value in enumerate(values)
    ]


def _meta(shard: str, served: bool) -> dict:
    meta = {"labels": [], "shard": shard, "seed": 0, "lars_fit_split": "calib", "lars_folds": 2}
    return {**meta, "served": {"approximate_features": dict(WHY)}} if served else meta


def _write(folder, by_split, shard, served=True):
    folder.mkdir()
    _write_outputs(folder, by_split, ["ptrue", "confidence"], _meta(shard, served))
    return json.loads((folder / "metadata.json").read_text())


def test_the_metadata_lists_the_departing_features_why_and_their_nan_rows(tmp_path):
    meta = _write(tmp_path / "one", {"calib": _rows([0.4, math.nan, math.nan]), "test": _rows([0.7])}, "0/1")
    assert meta["served"]["approximate_features"] == WHY
    assert meta["served"]["nan_rows"] == {"ptrue": {"calib": 2, "test": 0}}
    in_process = _write(tmp_path / "local", {"calib": _rows([0.4])}, "0/1", served=False)
    assert "served" not in in_process


def test_a_merge_keeps_every_shards_list_and_counts_all_rows(tmp_path):
    first = tmp_path / "s0"
    _write(first, {"calib": _rows([math.nan, 0.2])}, "0/2")
    second = tmp_path / "s1"
    _write(second, {"calib": _rows([math.nan], first=2)}, "1/2", served=False)  # the last shard read: in-process
    merge_shards([first, second], tmp_path / "merged")
    meta = json.loads((tmp_path / "merged" / "metadata.json").read_text())
    assert meta["served"]["approximate_features"] == WHY
    assert meta["served"]["nan_rows"] == {"ptrue": {"calib": 2}}
