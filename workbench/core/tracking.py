"""Experiment tracking: a thin wandb wrapper, offline by default, or nothing at all (``tracker: none``).

``WANDB_MODE`` from the environment wins (``offline``, ``disabled``, ``online``); without it wandb runs offline
and writes under the run directory, so nothing needs a network. wandb is imported only when a run starts.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class NullTracker:
    """A tracker that records nothing (``tracker: none``, or wandb disabled / unavailable)."""

    kind = "none"

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        """Drop ``metrics``."""

    def summary(self, values: dict[str, Any]) -> None:
        """Drop ``values``."""

    def finish(self) -> None:
        """Nothing to close."""


class WandbTracker:
    """Logs metrics and the resolved config to a wandb run (offline unless ``WANDB_MODE`` says otherwise)."""

    kind = "wandb"

    def __init__(self, run_dir: Path, name: str, config: dict[str, Any], project: str = "workbench") -> None:
        import wandb

        mode = os.environ.get("WANDB_MODE", "offline")
        self.mode = mode
        self._run = wandb.init(
            project=project, name=name, config=config, dir=str(run_dir), mode=mode, reinit="finish_previous"
        )

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        """Log scalar metrics (non-scalars are skipped)."""
        scalars = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
        if scalars:
            self._run.log(scalars, step=step)

    def summary(self, values: dict[str, Any]) -> None:
        """Set run-summary values."""
        for key, value in values.items():
            self._run.summary[key] = value

    def finish(self) -> None:
        """Close the run (flushes the offline files)."""
        self._run.finish()


def make_tracker(kind: str, run_dir: Path, name: str, config: dict[str, Any]) -> NullTracker | WandbTracker:
    """Build the tracker named by the recipe; fall back to :class:`NullTracker` (with a warning) if wandb fails."""
    if kind == "none" or os.environ.get("WANDB_MODE") == "disabled":
        return NullTracker()
    try:
        return WandbTracker(run_dir, name, config)
    except Exception as exc:  # wandb problems must never stop a run
        log.warning("wandb unavailable (%s); tracking disabled for this run", exc.__class__.__name__)
        return NullTracker()
