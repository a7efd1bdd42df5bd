"""Shared fixtures: tiny random models (unit tests) and the real embedded assets (integration tests)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Unit tests write caches (generations, embeddings, indexes) into a per-session temporary directory.

    Converted embedded models are the exception: they are expensive to rebuild and keyed by content, so the real
    model cache is linked in when it exists.
    """
    if "WORKBENCH_CACHE_DIR" in os.environ:
        yield
        return
    from pathlib import Path

    root = tmp_path_factory.mktemp("wb-cache")
    real_models = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "workbench" / "models"
    real_models.mkdir(parents=True, exist_ok=True)
    (root / "models").symlink_to(real_models, target_is_directory=True)
    os.environ["WORKBENCH_CACHE_DIR"] = str(root)
    yield
    os.environ.pop("WORKBENCH_CACHE_DIR", None)


@pytest.fixture(autouse=True, scope="session")
def _wiki_qa_built_once():
    """wiki-qa over the embedded articles is built once per test process for each set of settings
    (tests/wiki_qa_once.py says why that changes no result); builds over other articles run every time."""
    from tests.wiki_qa_once import BuiltOnce
    from workbench.data import wikiqa

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wikiqa, "build_wikiqa", BuiltOnce(wikiqa.build_wikiqa, wikiqa.load_articles))
        yield


def pytest_configure(config):
    # Two pytest workers on two cores: one torch thread each avoids costly oversubscription.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        try:
            import torch

            torch.set_num_threads(1)
        except ImportError:
            pass
    # a stage that builds a shared resource it does not declare fails its test (a run only warns)
    from workbench.stages.context import Resources

    Resources.strict = True
    # One test process runs hundreds of recipes, most of which train nothing (so the runner leaves glibc's mmap
    # threshold alone): mapping large blocks for the whole session keeps each worker's heap from growing from one
    # test's models to the next (a full suite without it: worker peaks 2.42 / 1.91 GB, with it 2.13 / 1.65 GB).
    from workbench.core.memory import map_large_allocations

    map_large_allocations()
    config._peak_rss_by_worker = {}


def pytest_sessionfinish(session):
    """Each process's peak resident memory over the session: a worker hands it to the controller."""
    from workbench.core.memory import process_peak_bytes

    peak = process_peak_bytes()
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["peak_rss_bytes"] = peak
    else:
        session.config._peak_rss_by_worker[os.environ.get("PYTEST_XDIST_WORKER", "main")] = peak


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown when the suite runs without xdist
def pytest_testnodedown(node, error):
    """Collect a finished xdist worker's peak resident memory (see :func:`pytest_sessionfinish`)."""
    peak = getattr(node, "workeroutput", {}).get("peak_rss_bytes")
    if peak is not None:
        node.config._peak_rss_by_worker[node.gateway.id] = peak


def pytest_terminal_summary(terminalreporter, config):
    """Print the suite's peak resident memory: each process's, and their sum (what the workers can hold at once at
    most). The goal is a suite that fits 2.5 GB; the figure is measured, never asserted."""
    peaks = getattr(config, "_peak_rss_by_worker", {})
    if not peaks:
        return
    each = ", ".join(f"{name} {peak / 1e9:.2f} GB" for name, peak in sorted(peaks.items()))
    total = sum(peaks.values()) / 1e9
    terminalreporter.write_line(f"peak resident memory: {each} (together at most {total:.2f} GB)")


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory):
    """Directory of a 2-layer random Llama + tiny BPE tokenizer with a chat template."""
    from tests.tiny_models import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_lm_long_dir(tmp_path_factory):
    """The tiny Llama with a 4096-token window (its byte-level tokenizer makes real-text prompts long)."""
    from tests.tiny_models import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama-long"), max_positions=4096)


@pytest.fixture(scope="session")
def tiny_lm_no_template_dir(tmp_path_factory):
    """Same tiny Llama, but its tokenizer has no chat template."""
    from tests.tiny_models import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama-plain"), chat_template=False)


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory):
    """Directory of a 2-layer random BERT encoder + WordPiece tokenizer (an embedder stand-in)."""
    from tests.tiny_models import build_tiny_encoder

    return build_tiny_encoder(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def smollm2_dir():
    """The real embedded SmolLM2-135M-Instruct, converted once into the workbench cache (integration tests)."""
    from workbench.assets import resolve_generator

    return resolve_generator("smollm2").path


@pytest.fixture(scope="session")
def minilm_dir():
    """The real embedded all-MiniLM-L6-v2 directory (integration tests)."""
    from workbench.assets import resolve_embedder

    return resolve_embedder("minilm").path


@pytest.fixture(autouse=True)
def _quiet_switch_restored():
    """``--quiet`` is a process-wide switch (workbench.core.logs): a CLI test that passes it in-process must not leave
    the tests after it quiet."""
    from workbench.core import logs

    before = logs.is_quiet()
    yield
    logs.set_quiet(before)
