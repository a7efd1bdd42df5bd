"""Cooperative interruption of long work on one thread: a server stops computing for a client that left.

A caller that may want to stop work it started runs it under :func:`interruptible`, giving a ``should_stop``
predicate; long loops call :func:`check_interrupt` between their steps (the generator does before every model
forward: each prefill batch and each decoding step), which raises :class:`Interrupted` once the predicate is true.
Work run without a scope never stops (``check_interrupt`` costs one attribute lookup).

The scope belongs to the thread that entered it: work handed to another thread is not interrupted.
:class:`Interrupted` derives from :class:`BaseException`, as :class:`asyncio.CancelledError` does, so a method's
``except Exception`` fallback never swallows it and answers on with a simpler step; ``try`` / ``finally`` and ``with``
blocks still clean up as it passes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_scope = threading.local()


class Interrupted(BaseException):
    """The work was stopped by its :func:`interruptible` scope (nobody waits for its result any more)."""


@contextmanager
def interruptible(should_stop: Callable[[], bool]) -> Iterator[None]:
    """Run the block so that :func:`check_interrupt` on this thread raises :class:`Interrupted` once ``should_stop()``
    is true. ``should_stop`` is called from the working thread at each check: keep it cheap and thread-safe. Scopes
    nest: the inner one applies until it ends."""
    outer = getattr(_scope, "should_stop", None)
    _scope.should_stop = should_stop
    try:
        yield
    finally:
        _scope.should_stop = outer


def check_interrupt() -> None:
    """Raise :class:`Interrupted` when this thread runs under an :func:`interruptible` scope that says stop; return at
    once otherwise."""
    should_stop = getattr(_scope, "should_stop", None)
    if should_stop is not None and should_stop():
        raise Interrupted("the work was interrupted: nobody waits for its result")
