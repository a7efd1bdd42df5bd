"""Shared resources are held only through the stages that declare them (StageSpec.resources); glibc maps large
allocations in runs that train (StageSpec.trains), and only while they run."""

from __future__ import annotations

import pytest

from tests.unit.core import fake_stages
from workbench.backends.cost import CostCounter
from workbench.recipe import load_recipe
from workbench.stages import registry
from workbench.stages.context import Resources, UndeclaredResourceError, resource_kind
from workbench.stages.registry import STAGES, StageSpec
from workbench.stages.runner import run_recipe

MODULE = "tests.unit.core.fake_stages"


@pytest.fixture
def widget_stages(monkeypatch):
    monkeypatch.setattr(fake_stages.Widget, "built", 0)
    specs = {
        "first": StageSpec("first", "f", f"{MODULE}:use_widget", resources=("widget",)),
        "middle": StageSpec("middle", "m", f"{MODULE}:idle"),
        "again": StageSpec("again", "a", f"{MODULE}:use_widget", resources=("widget",)),
        "keep": StageSpec("keep", "k", f"{MODULE}:use_widget", resources=("widget",)),
        "sneaky": StageSpec("sneaky", "s", f"{MODULE}:use_widget"),
    }
    for name, spec in specs.items():
        monkeypatch.setitem(registry.STAGES, name, spec)


def run(tmp_path, stages):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "r.yaml"
    path.write_text(f"name: t\nstages: [{', '.join(stages)}]\ntracker: none\nrun_dir: {tmp_path}/run\n")
    return run_recipe(load_recipe(str(path)))


def test_a_stage_that_does_not_declare_a_resource_runs_without_it(tmp_path, widget_stages):
    result = run(tmp_path, ["first", "middle", "again"])
    assert result.stage("first").summary["held_at_start"] == ""
    assert result.stage("middle").summary["held_at_start"] == ""  # dropped before the idle stage
    assert result.stage("again").summary["widget_builds"] == 2  # rebuilt by the next stage that uses it


def test_consecutive_stages_that_declare_a_resource_share_one_copy(tmp_path, widget_stages):
    result = run(tmp_path, ["first", "keep"])
    assert result.stage("keep").summary["held_at_start"] == "widget"
    assert result.stage("keep").summary["widget_builds"] == 1


def test_an_undeclared_resource_fails_under_strict_and_warns_in_a_run(tmp_path, widget_stages, monkeypatch):
    assert Resources.strict  # the test suite's conftest sets it
    with pytest.raises(UndeclaredResourceError, match="stage sneaky builds a 'widget' resource"):
        run(tmp_path / "strict", ["sneaky"])
    monkeypatch.setattr(Resources, "strict", False)
    result = run(tmp_path / "lenient", ["sneaky"])
    assert result.stage("sneaky").summary["widget_builds"] == 1  # the strict run refused before building
    log = (tmp_path / "lenient" / "run" / "logs" / "run.log").read_text()
    assert "stage sneaky built widget without declaring it" in log


class _Served:
    served = True


def test_hold_keeps_declared_kinds_the_generator_behind_a_controller_and_served_models(tmp_path):
    config = load_recipe("quickstart").config
    resources = Resources(config, CostCounter())
    for name in ("generator", "embedder", "retriever:bm25", "controller_generator@/m:abc"):
        resources.get(name, object)
    dropped = resources.hold("s", ("controller_generator",))
    assert sorted(dropped) == ["embedder", "retriever:bm25"]
    assert sorted(resources.held()) == ["controller_generator@/m:abc", "generator"]
    resources.finish()
    resources._built["generator"] = _Served()  # a remote model: nothing to free, re-probing costs time
    assert resources.hold("t", ()) == ["controller_generator@/m:abc"]
    assert resources.held() == ["generator"]


def test_resource_kinds_and_every_declaration_names_a_kind_the_resources_build():
    assert resource_kind("retriever:bm25") == "retriever"
    assert resource_kind("controller_generator@/x/y:fp") == "controller_generator"
    assert resource_kind("generator") == "generator"
    known = {"generator", "controller_generator", "embedder", "retriever", "seper_eval"}
    for spec in STAGES.values():
        assert set(spec.resources) <= known, spec.name


def test_large_allocations_are_mapped_for_the_whole_run_only_when_a_stage_trains(tmp_path, monkeypatch):
    from contextlib import contextmanager

    from workbench.stages import runner

    events: list[str] = []

    @contextmanager
    def mapped():
        events.append("mapped")
        try:
            yield True
        finally:
            events.append("restored")

    monkeypatch.setattr(runner, "large_allocations_mapped", mapped)
    monkeypatch.setattr(fake_stages, "EVENTS", events)
    specs = {
        "decode": StageSpec("decode", "d", f"{MODULE}:note"),
        "train": StageSpec("train", "t", f"{MODULE}:note", trains=True),
        "broken": StageSpec("broken", "b", f"{MODULE}:fail", trains=True),
    }
    for name, spec in specs.items():
        monkeypatch.setitem(registry.STAGES, name, spec)
    run(tmp_path / "decoding-only", ["decode"])
    assert events == ["decode"]  # a run that trains nothing keeps glibc's own threshold (sampling pays no mmap)
    events.clear()
    run(tmp_path / "with-training", ["decode", "train"])
    # once, before the first stage (the decoding stages' heap would outlast them); glibc's behaviour back at the end
    assert events == ["mapped", "decode", "train", "restored"]
    events.clear()
    with pytest.raises(RuntimeError, match="stage failed"):
        run(tmp_path / "failing", ["decode", "broken"])
    assert events == ["mapped", "decode", "restored"]  # restored when the run fails too
    trains = {name for name, spec in STAGES.items() if spec.trains and name not in specs}
    assert trains == {"distill", "tune_reader", "train_nli"}
    assert any(STAGES[name].trains for name in load_recipe("quickstart").config.stages)
    assert not any(STAGES[name].trains for name in load_recipe("bench-features").config.stages)
