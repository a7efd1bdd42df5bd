"""Where the workbench keeps its caches and finds its built-in recipes."""

from __future__ import annotations

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
    """The directory of built-in recipes (``$WORKBENCH_RECIPES_DIR`` overrides ``<project>/recipes``)."""
    override = os.environ.get("WORKBENCH_RECIPES_DIR")
    return Path(override) if override else PROJECT_ROOT / "recipes"
