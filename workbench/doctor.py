"""``workbench doctor``: what the workbench resolves on this machine, and what is missing."""

from __future__ import annotations

import importlib.metadata
import os
import platform

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from workbench.assets import asset_report
from workbench.core.paths import cache_dir

REQUIRED = (
    "torch",
    "transformers",
    "peft",
    "datasets",
    "onnx",
    "onnxruntime",
    "faiss-cpu",
    "bm25s",
    "gguf",
    "fastapi",
    "uvicorn",
)
"""The core (runtime + serve) libraries: ``pip install workbench``."""
TRAINING = ("lightning", "scikit-learn", "optuna", "deepspeed", "wandb", "sentence-transformers", "matplotlib")
"""The ``train`` extra's libraries (recipes, studies, distillation, reports): absent is reported, not an error —
``infer`` and ``serve`` run without them."""


def _row(*cells: str) -> list[str]:
    """Cells printed literally: rich would read ``[gemma]`` in ``pip install 'workbench[gemma]'`` as markup."""
    return [escape(cell) for cell in cells]


def run_doctor() -> int:
    """Print assets, library versions, threads, devices and caches; return 0 when nothing required is missing."""

    console = Console()
    missing: list[str] = []

    table = Table("asset", "package", "version", "status", "path", title="embedded assets", box=None)
    for row in asset_report():
        table.add_row(*_row(row["asset"], row["package"], row["version"], row["status"], row["path"]))
        absent_optional = row["optional"] and row["status"].startswith("not installed")  # gemma3 may be absent
        if row["status"] != "ok" and not absent_optional:
            missing.append(f"asset {row['asset']} ({row['package']})")
    console.print(table)

    versions = Table("library", "version", title="libraries", box=None)
    for dist in REQUIRED:
        try:
            versions.add_row(*_row(dist, importlib.metadata.version(dist)))
        except importlib.metadata.PackageNotFoundError:
            versions.add_row(dist, "MISSING")
            missing.append(dist)
    for dist in TRAINING:
        try:
            versions.add_row(*_row(dist, importlib.metadata.version(dist)))
        except importlib.metadata.PackageNotFoundError:
            versions.add_row(*_row(dist, "not installed (training only: pip install 'workbench[train]')"))
    console.print(versions)

    import torch

    env = Table("setting", "value", title="runtime", box=None)
    env.add_row("python", platform.python_version())
    env.add_row("cpu cores", str(os.cpu_count()))
    env.add_row("torch threads", str(torch.get_num_threads()))
    env.add_row("cuda", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "not available")
    env.add_row(*_row("cache dir", str(cache_dir())))
    for var in ("HF_HUB_OFFLINE", "WANDB_MODE", "WORKBENCH_CACHE_DIR", "OMP_NUM_THREADS"):
        env.add_row(*_row(var, os.environ.get(var, "(unset)")))
    converted = sorted(p.name for p in cache_dir("models").iterdir() if p.is_dir())
    env.add_row(*_row("converted models", ", ".join(converted) or "none yet (converted on first use, ~35 s)"))
    console.print(env)

    if missing:
        console.print(f"[red]missing:[/red] {escape(', '.join(missing))} — run `make setup`")
        return 1
    console.print("[green]everything required is installed[/green]")
    return 0
