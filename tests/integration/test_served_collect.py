"""The collect stage through the OpenAI protocol, against `workbench serve-model` on the tiny Llama: parity with the
in-process backend, shards + merge, a server killed mid-collection and resumed on another port, the API key kept off
disk, and the refusals at load of what only the in-process backend gives."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import workbench.stages.collect.run as collect
from tests.integration.test_collect import _recipe, _rows, _same, merge_two_shards
from workbench.core.errors import ConfigError, WorkbenchError
from workbench.recipe import load_recipe
from workbench.serve.openai_server import start_in_thread
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration

SPLITS = ("calib", "test")
LABELS = ["collect.labels=[rag, seper]", "generator.cache=false"]
TOLERANCE = 1e-4  # a served batch can pad differently: floats may move in the last bits; texts may not
SECRET = "sk-test-0123456789-secret"


def _served(url, tokenizer):
    return [
        "generator.backend=openai",
        f"generator.base_url={url}",
        "generator.model=tiny",
        f"generator.tokenizer={tokenizer}",
        "generator.top_logprobs=1000",
    ]


def _recipe_in(folder: Path, model, encoder) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    return _recipe(folder, model, encoder)


def _collect(folder: Path, model, encoder, overrides):
    """Run build_data + collect in ``folder/run`` → the stage's folder and ``{split: rows}``."""
    run_recipe(load_recipe(_recipe_in(folder, model, encoder), [*LABELS, *overrides]))
    stage_dir = folder / "run" / "stages" / "collect"
    return stage_dir, {s: _rows(stage_dir, s) for s in SPLITS}


@pytest.fixture(scope="module")
def server(tiny_lm_long_dir):
    with start_in_thread(str(tiny_lm_long_dir), served_name="tiny", max_logprobs=1000, batch_size=8) as srv:
        yield srv


@pytest.fixture(scope="module")
def served_run(tmp_path_factory, server, tiny_lm_long_dir, tiny_encoder_dir):
    """The unsharded served collection: its folder and rows."""
    folder = tmp_path_factory.mktemp("served")
    _, rows = _collect(folder, "tiny", tiny_encoder_dir, _served(server.base_url, tiny_lm_long_dir))
    return folder, rows


def test_served_collect_matches_in_process(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, server, served_run):
    _, local = _collect(tmp_path / "local", tiny_lm_long_dir, tiny_encoder_dir, [])
    folder, served = served_run
    for split in SPLITS:
        assert [r["position"] for r in served[split]] == [0, 1, 2, 3], split
        _same(local[split], served[split], rel=TOLERANCE)
    manifest = json.loads((folder / "run" / "manifest.json").read_text())
    block = manifest["served_generator"]
    assert block["base_url"] == server.base_url and block["model"] == "tiny"
    caps = block["capabilities"]
    vocab = json.loads((Path(tiny_lm_long_dir) / "config.json").read_text())["vocab_size"]
    assert caps["logprobs"] and caps["echo"] and caps["token_prompts"]
    assert caps["top_logprobs"] >= vocab  # the top k cover the vocabulary: entropies and P(True) are exact
    assert block["probe"] and block["probe"]["context"] == 4096  # the window it ran with: the server's
    # serve-model echoes: every collected feature is exact, and the collection says so
    assert block["approximate_features"] == {} and not block["absent_reads"]
    metadata = json.loads((folder / "run" / "stages" / "collect" / "metadata.json").read_text())
    assert metadata["served"]["approximate_features"] == {} and metadata["served"]["nan_rows"] == {}
    local_manifest = json.loads((tmp_path / "local" / "run" / "manifest.json").read_text())
    assert "served_generator" not in local_manifest
    local_metadata = json.loads((tmp_path / "local" / "run" / "stages" / "collect" / "metadata.json").read_text())
    assert "served" not in local_metadata


def test_served_shards_merge(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, server, served_run):
    def run_shard(i):
        overrides = [*_served(server.base_url, tiny_lm_long_dir), f"collect.shard={i}/2"]
        return _collect(tmp_path, "tiny", tiny_encoder_dir, overrides)[0]  # build_data runs once

    merge_two_shards(tmp_path, run_shard)
    for split in SPLITS:
        _same(served_run[1][split], _rows(tmp_path / "merged", split), rel=TOLERANCE)


def test_served_collect_survives_a_killed_server(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, served_run, monkeypatch):
    first = start_in_thread(str(tiny_lm_long_dir), served_name="tiny", max_logprobs=1000, batch_size=8)
    second = start_in_thread(str(tiny_lm_long_dir), served_name="tiny", max_logprobs=1000, batch_size=8)
    assert second.base_url != first.base_url  # both alive: two ports
    real = collect._collect_chunk
    calls = []

    def killing(*args, **kwargs):
        calls.append(1)
        out = real(*args, **kwargs)
        if len(calls) == 1:
            first.stop()  # the first chunk is checkpointed; the server goes away before the second
        return out

    monkeypatch.setattr(collect, "_collect_chunk", killing)
    fast = ["generator.retries=1", "generator.timeout_s=5"]  # retries=0 is refused at load: see below
    recipe = _recipe_in(tmp_path, "tiny", tiny_encoder_dir)
    try:
        with pytest.raises(WorkbenchError) as failed:
            run_recipe(load_recipe(recipe, [*LABELS, *_served(first.base_url, tiny_lm_long_dir), *fast]))
    except BaseException:
        second.stop()
        raise
    finally:
        first.stop()
    message = str(failed.value)
    assert "\n" not in message and first.base_url in message, message
    assert len(calls) == 2  # the first chunk finished, the second started and failed against the dead server

    resumed = []

    def counting(*args, **kwargs):
        resumed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(collect, "_collect_chunk", counting)
    with second:  # a new server on another port: the stage key ignores base_url, so the run resumes
        run_recipe(load_recipe(recipe, [*LABELS, *_served(second.base_url, tiny_lm_long_dir), *fast]))
    assert len(resumed) == 3  # calib's second chunk and test's two: the checkpointed chunk is not recomputed
    stage_dir = tmp_path / "run" / "stages" / "collect"
    for split in SPLITS:
        rows = _rows(stage_dir, split)
        assert [r["position"] for r in rows] == [0, 1, 2, 3], split
        _same(served_run[1][split], rows, rel=TOLERANCE)


def test_api_key_never_lands_on_disk(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, server, monkeypatch):
    monkeypatch.setenv("WB_TEST_KEY", SECRET)
    overrides = [
        *_served(server.base_url, tiny_lm_long_dir),
        "generator.api_key_env=WB_TEST_KEY",
        "generator.cache=true",  # the generation cache is written too
        "collect.limit=2",
        "collect.features=[confidence, ptrue]",
    ]
    run_recipe(load_recipe(_recipe_in(tmp_path, "tiny", tiny_encoder_dir), [*LABELS, *overrides]))
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["served_generator"]["api_key_env"] == "WB_TEST_KEY"
    roots = [tmp_path, Path(os.environ["WORKBENCH_CACHE_DIR"])]
    seen = 0
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink() and "models" not in path.relative_to(root).parts[:1]:
                seen += 1
                assert SECRET.encode() not in path.read_bytes(), path
    assert seen > 10


@pytest.mark.parametrize(
    ("override", "named", "capability"),
    [
        ("collect.features=[confidence, inside]", "inside", "hidden_states"),
        ("collect.features=[attention_score]", "attention_score", "attentions"),
        ("evaluate.methods=[d2rag]", "d2rag", "step_logits"),
    ],
)
def test_served_refuses_in_process_only_work(tmp_path, tiny_encoder_dir, override, named, capability):
    recipe = _recipe_in(tmp_path, "tiny", tiny_encoder_dir)
    overrides = [*_served("http://127.0.0.1:9/v1", "tiny"), override]
    if override.startswith("evaluate"):
        overrides.append("stages=[build_data, collect, evaluate]")
    with pytest.raises(ConfigError) as refused:
        load_recipe(recipe, overrides)
    message = str(refused.value)
    assert "\n" not in message and named in message and capability in message, message


def test_served_needs_a_base_url(tmp_path, tiny_encoder_dir):
    recipe = _recipe_in(tmp_path, "tiny", tiny_encoder_dir)
    with pytest.raises(ConfigError, match="base_url") as refused:
        load_recipe(recipe, ["generator.backend=openai", "generator.model=tiny"])
    assert "\n" not in str(refused.value)


def test_served_accepts_zero_retries(tmp_path, tiny_encoder_dir):
    recipe = _recipe_in(tmp_path, "tiny", tiny_encoder_dir)
    loaded = load_recipe(recipe, [*_served("http://127.0.0.1:9/v1", "tiny"), "generator.retries=0"])
    assert loaded.config.generator.retries == 0
