"""build_data turns the data builders' own refusals (unknown templates, chunk sizes) into one-line ConfigErrors."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from tests.unit.data import fake_articles
from workbench.core.errors import ConfigError
from workbench.recipe import RecipeConfig
from workbench.stages.build_data import run as build_data


def test_an_unknown_template_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setattr("workbench.data.wikiqa.load_articles", fake_articles)
    config = RecipeConfig(name="t", stages=["build_data"])
    config.data.templates = ["cloze", "nope"]
    ctx = SimpleNamespace(config=config, out_dir=tmp_path, log=logging.getLogger("test.build_data"))
    with pytest.raises(ConfigError, match=r"^data: templates must be a non-empty subset of") as info:
        build_data.run(ctx)
    assert "\n" not in str(info.value)


def test_a_chunk_overlap_the_chunker_refuses_is_a_config_error():
    config = RecipeConfig(name="t", stages=["build_data"])
    config.data.chunking, config.data.chunk_size, config.data.chunk_overlap = "fixed", 50, 50
    with pytest.raises(ConfigError, match=r"^data: fixed chunking: overlap must be"):
        build_data.make_chunker(config.data)


@pytest.mark.parametrize(
    ("rows", "fractions", "sizes"),
    [
        (10, [0.5, 0, 0.5, 0], {"train": 5, "calib": 0, "val": 5, "test": 0}),
        (3, [0.5, 0.5, 0, 0], {"train": 2, "calib": 1, "val": 0, "test": 0}),
        (1, [0.5, 0.5, 0, 0], {"train": 0, "calib": 1, "val": 0, "test": 0}),  # the remainder: calib, not test
        (4, [0, 0, 0, 1], {"train": 0, "calib": 0, "val": 0, "test": 4}),
    ],
)
def test_zero_fractions_give_empty_splits_of_a_local_file(tmp_path, rows, fractions, sizes):
    import json

    from workbench.data.dataset_store import load_saved_dataset_dict

    qa_file = tmp_path / "qa.jsonl"
    qa_file.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "question": f"Question {i}?", "answers": [f"a{i}"]}) + "\n" for i in range(rows)
        )
    )
    config = RecipeConfig(name="t", stages=["build_data"])
    config.data.dataset, config.data.fractions = str(qa_file), fractions
    out = tmp_path / "out"
    out.mkdir()
    summary = build_data.run(SimpleNamespace(config=config, out_dir=out, log=logging.getLogger("test.build_data")))
    assert {split: summary[f"n_{split}"] for split in sizes} == sizes
    qa = load_saved_dataset_dict(out / "qa")
    assert {split: qa[split].num_rows for split in sizes} == sizes
    assert sorted(i for split in sizes for i in qa[split]["id"]) == sorted(f"q{i}" for i in range(rows))
