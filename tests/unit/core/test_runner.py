"""The runner: resolved config, manifest, logs; cached stages are skipped; interrupted runs resume."""

from __future__ import annotations

import json
import os

import pytest

from workbench.core.errors import ConfigError
from workbench.core.launch import launch_rank
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


# ---------------------------------------------------------------------------------------- multi-process launches
RANK_ENV = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "JSM_NAMESPACE_RANK")


@pytest.fixture
def spread_stage(fake_stages, monkeypatch):
    monkeypatch.setitem(
        registry.STAGES,
        "spread",
        StageSpec("spread", "s", f"{MODULE}:spread", sections=("retrieval",), inputs=("produce",), multi_process=True),
    )
    for name in RANK_ENV:
        monkeypatch.delenv(name, raising=False)


def spread_recipe(tmp_path, *overrides):
    return recipe(tmp_path, "stages=[produce,spread,consume]", *overrides)


def snapshot(root):
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("variable", ["RANK", "LOCAL_RANK", "SLURM_PROCID"])
def test_other_rank_runs_only_the_multi_process_stage_without_lock_or_writes(
    tmp_path, spread_stage, monkeypatch, variable
):
    from filelock import FileLock

    run_recipe(recipe(tmp_path, "stages=[produce]"))  # the stages before the multi-process one, in one process
    run = tmp_path / "run"
    lock = FileLock(str(run / ".lock"))
    lock.acquire(timeout=0)  # rank 0 holds the run directory
    try:
        before = snapshot(run)
        monkeypatch.setenv(variable, "1")
        result = run_recipe(spread_recipe(tmp_path))
        assert snapshot(run) == before
    finally:
        lock.release()
    assert [(s.name, s.cached) for s in result.stages] == [("spread", False)]
    assert result.stage("spread").summary["spread"] == 5
    assert calls(tmp_path, "spread") == 1 and calls(tmp_path, "produce") == 1
    assert not (tmp_path / "calls-consume.txt").exists()  # rank 0's alone
    out_dir = (tmp_path / "spread-out-dir.txt").read_text()
    assert not out_dir.startswith(str(run)) and not os.path.exists(out_dir)


def test_other_rank_refuses_when_an_earlier_stage_is_not_cached(tmp_path, spread_stage, monkeypatch):
    monkeypatch.setenv("SLURM_PROCID", "3")
    with pytest.raises(ConfigError, match=r"stage produce is not cached.*stages=\[produce\]") as info:
        run_recipe(spread_recipe(tmp_path))
    assert "\n" not in str(info.value)
    assert not (tmp_path / "run").exists() and not (tmp_path / "calls-spread.txt").exists()
    # a changed earlier stage (its key) is not cached either
    monkeypatch.delenv("SLURM_PROCID")
    run_recipe(recipe(tmp_path, "stages=[produce]"))
    monkeypatch.setenv("SLURM_PROCID", "3")
    with pytest.raises(ConfigError, match=r"stage produce is not cached.*answer\.limit=5 'stages=\[produce\]'"):
        run_recipe(spread_recipe(tmp_path, "answer.limit=5"))  # the command to run first keeps the overrides
    with pytest.raises(ConfigError, match="--force produce"):
        run_recipe(spread_recipe(tmp_path), force=["produce"])
    assert not (tmp_path / "calls-spread.txt").exists()


def test_other_rank_skips_a_cached_multi_process_stage_and_rank_zero_runs_everything(
    tmp_path, spread_stage, monkeypatch
):
    first = run_recipe(spread_recipe(tmp_path))  # no launcher variables: rank 0, the whole recipe
    assert [s.cached for s in first.stages] == [False, False, False]
    assert (tmp_path / "run" / "stages" / "spread" / "spread.txt").read_text() == "5"
    monkeypatch.setenv("RANK", "2")
    again = run_recipe(spread_recipe(tmp_path))
    assert [(s.name, s.cached) for s in again.stages] == [("spread", True)]
    assert calls(tmp_path, "spread") == 1


def test_other_rank_of_a_recipe_without_multi_process_stage_runs_as_usual(tmp_path, spread_stage, monkeypatch):
    monkeypatch.setenv("RANK", "1")  # e.g. srun tasks each running their own recipe
    result = run_recipe(recipe(tmp_path))
    assert [s.cached for s in result.stages] == [False, False]
    assert (tmp_path / "run" / "manifest.json").exists()


def test_launch_rank_reads_the_launchers_variables():
    assert launch_rank({}) == 0
    assert launch_rank({"RANK": "0", "LOCAL_RANK": "0"}) == 0
    assert launch_rank({"RANK": "5", "LOCAL_RANK": "1"}) == 5
    assert launch_rank({"SLURM_PROCID": "7"}) == 7
    with pytest.raises(ConfigError, match="RANK"):
        launch_rank({"RANK": "one"})
