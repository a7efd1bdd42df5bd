"""The ``doctor`` verb: what is resolved and what is missing."""

from __future__ import annotations

import typer


def doctor_command() -> None:
    """Print what is resolved (assets, versions, threads, devices, caches) and what is missing."""
    from workbench.doctor import run_doctor

    raise typer.Exit(run_doctor())
