"""build_data turns the data builders' own refusals (unknown templates, chunk sizes) into one-line ConfigErrors."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from tests.unit.data import fake_articles
from workbench.core.errors import ConfigError
from workbench.recipe import RecipeConfig
from workbench.stages import build_data


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
