"""The runner: resolved config, manifest, logs; cached stages are skipped; interrupted runs resume."""

from __future__ import annotations

import json

import pytest

from workbench.recipe import load_recipe
from workbench.stages import registry
from workbench.stages.registry import StageSpec
from workbench.stages.runner import run_recipe

MODULE = "tests.unit.core.fake_stages"


@pytest.fixture
def fake_stages(monkeypatch):
    monkeypatch.setitem(
        registry.STAGES, "produce", StageSpec("produce", "p", f"{MODULE}:produce", sections=("answer",))
    )
    monkeypatch.setitem(
        registry.STAGES,
        "consume",
        StageSpec("consume", "c", f"{MODULE}:consume", sections=("retrieval",), inputs=("produce",)),
    )


def recipe(tmp_path, *overrides):
    path = tmp_path / "r.yaml"
    path.write_text(
        f"name: t\nstages: [produce, consume]\ntracker: none\nrun_dir: {tmp_path}/run\nanswer:\n  limit: 4\n"
    )
    return load_recipe(str(path), list(overrides))


def calls(tmp_path, name):
    return int((tmp_path / f"calls-{name}.txt").read_text())


def test_run_writes_config_manifest_logs_and_outputs(tmp_path, fake_stages):
    result = run_recipe(recipe(tmp_path))
    run = tmp_path / "run"
    assert (run / "stages" / "consume" / "double.txt").read_text() == "8"
    assert "limit: 4" in (run / "config.yaml").read_text()
    assert (run / "logs" / "run.log").read_text().count("stage produce: running") == 1
    manifest = json.loads((run / "manifest.json").read_text())
    assert set(manifest["stages"]) == {"produce", "consume"}
    assert "value.txt" in manifest["stages"]["produce"]["files"]
    assert manifest["versions"]["workbench"]
    assert [s.cached for s in result.stages] == [False, False]


def test_rerun_skips_cached_stages(tmp_path, fake_stages):
    run_recipe(recipe(tmp_path))
    again = run_recipe(recipe(tmp_path))
    assert [s.cached for s in again.stages] == [True, True]
    assert calls(tmp_path, "produce") == 1 and calls(tmp_path, "consume") == 1
    assert again.stage("consume").summary["double"] == 8


def test_config_change_invalidates_the_stage_and_its_dependants(tmp_path, fake_stages):
    run_recipe(recipe(tmp_path))
    # retrieval is only in consume's sections: produce stays cached
    res = run_recipe(recipe(tmp_path, "retrieval.k=3"))
    assert [s.cached for s in res.stages] == [True, False]
    # answer is in produce's sections: both rerun (consume's input key changed)
    res = run_recipe(recipe(tmp_path, "retrieval.k=3", "answer.limit=5"))
    assert [s.cached for s in res.stages] == [False, False]
    assert (tmp_path / "run" / "stages" / "consume" / "double.txt").read_text() == "10"


def test_interrupted_stage_leaves_no_partial_output_and_resumes(tmp_path, fake_stages, monkeypatch):
    monkeypatch.setenv("WB_TEST_FAIL_CONSUME", "1")
    with pytest.raises(KeyboardInterrupt):
        run_recipe(recipe(tmp_path))
    stages = tmp_path / "run" / "stages"
    assert not (stages / "consume").exists()
    assert not any(p.name.startswith(".consume") for p in stages.iterdir())
    monkeypatch.delenv("WB_TEST_FAIL_CONSUME")
    res = run_recipe(recipe(tmp_path))
    assert [s.cached for s in res.stages] == [True, False]
    assert calls(tmp_path, "produce") == 1


def test_force_recomputes(tmp_path, fake_stages):
    run_recipe(recipe(tmp_path))
    res = run_recipe(recipe(tmp_path), force=["produce"])
    assert [s.cached for s in res.stages] == [False, True]
