"""Shared fixtures for the uncertainty tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def generator(tiny_lm_long_dir):
    """The tiny random Llama with a long window (a module may define its own ``generator`` instead)."""
    from workbench.backends.generator import Generator

    return Generator(tiny_lm_long_dir, batch_size=16)
