"""The built-in recipes ship inside the wheel (workbench.builtin_recipes ← recipes/), and every package is listed."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from workbench.core.paths import PROJECT_ROOT, recipes_dir


def test_recipes_dir_prefers_the_environment_then_the_source_tree(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_RECIPES_DIR", str(tmp_path))
    assert recipes_dir() == tmp_path
    monkeypatch.delenv("WORKBENCH_RECIPES_DIR")
    assert recipes_dir() == PROJECT_ROOT / "recipes"


def test_pyproject_lists_every_package():
    config = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {
        ".".join(p.relative_to(PROJECT_ROOT).parent.parts) for p in (PROJECT_ROOT / "workbench").rglob("__init__.py")
    }
    assert set(config["packages"]) == found | {"workbench.builtin_recipes"}
    assert config["package-dir"] == {"workbench.builtin_recipes": "recipes"}


def test_the_wheel_carries_the_recipes_and_an_installed_package_finds_them(tmp_path):
    import shutil

    source = tmp_path / "src"  # a copy: setuptools writes build/ next to the project it builds
    shutil.copytree(PROJECT_ROOT / "workbench", source / "workbench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(PROJECT_ROOT / "recipes", source / "recipes")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(PROJECT_ROOT / name, source / name)
    command = [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-v"]
    out = subprocess.run(
        [*command, "-w", str(tmp_path / "dist")], cwd=source, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    # every folder with files the wheel ships is a listed package: setuptools warns about none
    assert "BuildBackendWarning" not in out.stdout + out.stderr and "would be ignored" not in out.stdout + out.stderr
    (wheel,) = (tmp_path / "dist").glob("workbench-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = {Path(n).name for n in archive.namelist() if n.startswith("workbench/builtin_recipes/")}
        archive.extractall(tmp_path / "site")
    assert {p.name for p in (PROJECT_ROOT / "recipes").glob("*.yaml")} <= shipped
    # the unpacked wheel alone on the path, outside the source tree: recipes come from the package resources
    env = {k: v for k, v in os.environ.items() if k not in ("WORKBENCH_RECIPES_DIR", "PYTHONPATH")}
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import workbench.core.paths as p, workbench.recipe as r; "
        "assert p.__file__.startswith(sys.argv[1]), p.__file__; print(sorted(r.builtin_recipes()))"
    )
    listed = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "site")], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "quickstart" in listed.stdout and "bench-runtime" in listed.stdout
