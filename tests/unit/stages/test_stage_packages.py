"""The stage table gathers its rows from stage packages (``workbench/stages/<name>/``, ``workbench/bench/<name>/``):
each package's ``SPECS`` name run code inside the package and the package's own settings, and gathering them
imports no run code, so loading a recipe stays light."""

from __future__ import annotations

import subprocess
import sys

from workbench.bench.registry import BENCHMARKS
from workbench.stages.registry import STAGE_PACKAGES, STAGES
from workbench.stages.spec import StageSpec, gather_specs

PACKAGES = [f"workbench.stages.{name}" for name in STAGE_PACKAGES] + [f"workbench.bench.{name}" for name in BENCHMARKS]


def test_every_packaged_spec_is_in_the_table_and_lives_in_its_package():
    import importlib

    for package in PACKAGES:
        specs = importlib.import_module(package).SPECS
        assert specs, package
        for spec in specs:
            assert STAGES[spec.name] is spec
            assert spec.entry_module == f"{package}.run", spec.name
            assert spec.settings_module in (None, f"{package}.settings"), spec.name
            assert callable(spec.load()), spec.name


def test_benchmarks_follow_the_pipeline_in_the_table():
    from workbench.bench.registry import benchmark_specs
    from workbench.stages.registry import PIPELINE

    assert list(STAGES) == [*PIPELINE, *benchmark_specs()]
    assert not any(name.startswith(("bench_", "report_bench")) for name in PIPELINE)
    assert all(name.startswith(("bench_", "report_bench")) for name in benchmark_specs())


def test_gathering_a_package_takes_its_specs_in_order(tmp_path, monkeypatch):
    package = tmp_path / "toy_stages"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from workbench.stages.spec import StageSpec\n"
        "SPECS = (StageSpec('toy_b', 'b', f'{__name__}.run:run'), StageSpec('toy_a', 'a', f'{__name__}.run:run'))\n"
    )
    (package / "run.py").write_text("def run(ctx):\n    return {'ran': True}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    specs = gather_specs(("toy_stages",))
    assert list(specs) == ["toy_b", "toy_a"]
    assert all(isinstance(spec, StageSpec) for spec in specs.values())
    assert "toy_stages.run" not in sys.modules  # gathered, not run
    assert specs["toy_a"].load()(None) == {"ran": True}


def run_modules_imported_by(statement: str) -> str:
    """The stage and benchmark run modules a fresh interpreter has imported after ``statement``, as it prints them."""
    code = (
        f"import sys; {statement};"
        "print(sorted(m for m in sys.modules if m.startswith(('workbench.stages.', 'workbench.bench.'))"
        " and m.endswith('.run')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_stage_table_imports_no_run_code():
    assert run_modules_imported_by("import workbench.stages.registry") == "[]"


def test_loading_the_benchmark_recipes_whose_checks_live_in_their_settings_imports_no_run_code():
    names = ("bench-decoding", "bench-features", "bench-gpu")
    loads = f"from workbench.recipe import load_recipe; [load_recipe(n) for n in {names!r}]"
    assert run_modules_imported_by(loads) == "[]"
