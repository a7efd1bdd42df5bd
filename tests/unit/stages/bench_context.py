"""A stand-in stage context for the benchmark stages' ``run(ctx)``, for tests that call a stage without the runner."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def bench_context(config: Any, tmp_path: Path, inputs: dict[str, Path], log: str, **extra: Any) -> SimpleNamespace:
    """A context with ``config``, ``inputs`` (input stage name → its output directory), a fresh ``out_dir``
    (``<tmp_path>/out``, created), real Resources over one fresh ``counter``, the logger named ``log``, and any
    ``extra`` attributes (e.g. ``rerun``)."""
    from workbench.backends.cost import CostCounter
    from workbench.stages.context import Resources

    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    counter = CostCounter()
    return SimpleNamespace(
        config=config,
        inputs=inputs,
        out_dir=out,
        resources=Resources(config, counter),
        counter=counter,
        log=logging.getLogger(log),
        **extra,
    )
