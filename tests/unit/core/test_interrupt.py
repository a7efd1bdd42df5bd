"""core.interrupt: a scope stops work at its next check, on its own thread only, past ``except Exception``."""

from __future__ import annotations

import threading

import pytest

from workbench.core.interrupt import Interrupted, check_interrupt, interruptible


def test_a_check_raises_once_the_scope_says_stop_and_never_without_a_scope():
    check_interrupt()  # no scope: free
    stop = False
    with interruptible(lambda: stop):
        check_interrupt()
        stop = True
        with pytest.raises(Interrupted):
            check_interrupt()
    check_interrupt()  # the scope ended


def test_scopes_nest_and_an_except_exception_fallback_does_not_swallow_it():
    with interruptible(lambda: True), interruptible(lambda: False):
        check_interrupt()  # the inner scope applies

    def method_with_fallback() -> str:
        try:
            check_interrupt()
        except Exception:  # a method's recovery path must not answer on
            return "fell back"
        return "answered"

    with interruptible(lambda: True), pytest.raises(Interrupted):
        method_with_fallback()


def test_a_scope_applies_to_its_own_thread_only():
    seen: list[str] = []

    def other() -> None:
        check_interrupt()
        seen.append("ran")

    with interruptible(lambda: True):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(5)
    assert seen == ["ran"]
