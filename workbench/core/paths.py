"""Where the workbench keeps its caches and finds its built-in recipes."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
PROJECT_ROOT = PACKAGE_ROOT.parent


def cache_dir(*parts: str) -> Path:
    """The workbench cache (``$WORKBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/workbench``, else ``~/.cache/workbench``).

    Converted models, embedding matrices, indexes and the generation cache live here. The directory (and the
    requested sub-directory) is created on first use.
    """
    root = os.environ.get("WORKBENCH_CACHE_DIR")
    if root:
        base = Path(root)
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "workbench"
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def recipes_dir() -> Path:
    """The directory of built-in recipes: ``$WORKBENCH_RECIPES_DIR`` when set; else ``<project>/recipes`` in a source
    checkout (or an editable install); else the copy shipped inside the installed package
    (``workbench.builtin_recipes``, the same files: pyproject.toml maps that package to the top-level ``recipes/``)."""
    override = os.environ.get("WORKBENCH_RECIPES_DIR")
    if override:
        return Path(override)
    source = PROJECT_ROOT / "recipes"
    if source.is_dir():
        return source

    # recipes/ holds no Python, so the package is a namespace package: its one search location is the folder
    spec = importlib.util.find_spec("workbench.builtin_recipes")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else source
