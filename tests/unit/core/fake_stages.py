"""Tiny stage functions for runner tests (they count their calls in a file next to the run directory)."""

from __future__ import annotations

import os
from pathlib import Path


def _bump(ctx, name: str) -> None:
    counter = Path(ctx.run_dir).parent / f"calls-{name}.txt"
    counter.write_text(str(int(counter.read_text()) + 1 if counter.exists() else 1))


def produce(ctx):
    _bump(ctx, "produce")
    (ctx.out_dir / "value.txt").write_text(str(ctx.config.answer.limit))
    return {"value": ctx.config.answer.limit}


def consume(ctx):
    _bump(ctx, "consume")
    if os.environ.get("WB_TEST_FAIL_CONSUME") == "1":
        (ctx.out_dir / "partial.txt").write_text("half")
        raise KeyboardInterrupt
    value = int((ctx.inputs["produce"] / "value.txt").read_text())
    (ctx.out_dir / "double.txt").write_text(str(2 * value))
    return {"double": 2 * value}


def spread(ctx):
    """A multi-process stage: records where it was asked to write, then writes there."""
    _bump(ctx, "spread")
    (Path(ctx.run_dir).parent / "spread-out-dir.txt").write_text(str(ctx.out_dir))
    value = int((ctx.inputs["produce"] / "value.txt").read_text())
    (ctx.out_dir / "spread.txt").write_text(str(value + 1))
    return {"spread": value + 1}


class Widget:
    """A stand-in for a heavy shared resource (a model); counts how often it was built."""

    built = 0

    def __init__(self) -> None:
        Widget.built += 1


def use_widget(ctx):
    """Builds (or reuses) the run's ``widget`` resource; says what the run held when the stage began."""
    held = ctx.resources.held()
    ctx.resources.get("widget", Widget)
    return {"held_at_start": ",".join(held), "widget_builds": Widget.built}


def idle(ctx):
    """Uses no shared resource; says what the run holds while it runs."""
    return {"held_at_start": ",".join(ctx.resources.held())}


EVENTS: list[str] = []
"""What :func:`note` recorded (a test replaces it with a list of its own)."""


def note(ctx):
    """Records the stage's name in :data:`EVENTS` (a test's timeline)."""
    EVENTS.append(ctx.spec.name)
    return {}


def fail(ctx):
    """A stage that fails."""
    raise RuntimeError("stage failed")


def idle_counted(ctx):
    """Does nothing but count its runs (under its own stage name)."""
    _bump(ctx, ctx.spec.name)
    return {}
