"""The served tests' shared pair: the tiny Llama in-process and the same model behind a live ``serve-model``."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def local(tiny_lm_dir):
    """The tiny Llama in-process (no cache, batches of 4)."""
    from workbench.backends.generator import Generator

    return Generator(str(tiny_lm_dir), cache=None, batch_size=4)


@pytest.fixture(scope="module")
def server(tiny_lm_dir):
    """The tiny Llama served by ``serve-model`` in a thread (up to 1,000 log-probs per position, batches of 4)."""
    from workbench.serve.openai_server import start_in_thread

    with start_in_thread(str(tiny_lm_dir), served_name="tiny", max_logprobs=1000, batch_size=4) as srv:
        yield srv
