"""Served embeddings end to end: the real MiniLM through ``serve-model``'s ``/v1/embeddings`` equals the in-process
embedder (cosine distance ≤ 1e-5); a tiny run retrieving densely with ``embedder.backend: openai`` exports a bundle
that records the server (URL, name, key variable — never the key) and whose runtime answers through it, or refuses in
one line when it is gone; and Infinity (``infinity_emb``) where it is installed."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.bundle_run import build_tiny_run
from workbench.backends.factory import build_served_embedder
from workbench.backends.served_client import ServedModelError
from workbench.serve.openai_server import start_in_thread

pytestmark = pytest.mark.integration

PARITY = 1e-5  # cosine distance
TEXTS = [
    "Paris is the capital of France.",
    "The Nile flows through eleven countries in north-eastern Africa.",
    "Mitochondria are the powerhouse of the cell.",
    "Who wrote the novel Moby-Dick?",
    "",
]
SECRET = "sk-embed-test-0123456789-secret"


def _distance(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(1.0 - np.sum(a * b, axis=1)))


def test_real_minilm_served_equals_in_process(tiny_lm_dir, minilm_dir):
    from workbench.backends.embedder import Embedder

    local = Embedder("minilm", cache=False)
    with start_in_thread(str(tiny_lm_dir), served_name="tiny", embedder="minilm") as server:
        for encoding_format in ("float", "base64"):
            served = build_served_embedder(
                base_url=server.base_url, model="minilm", batch_size=2, encoding_format=encoding_format, cache=False
            )
            got = served.encode(TEXTS)
            assert got.shape == (len(TEXTS), 384) and _distance(got, local.encode(TEXTS)) <= PARITY


def test_dense_run_on_a_served_embedder_exports_a_bundle_that_answers_through_it(
    tmp_path, tiny_lm_long_dir, tiny_encoder_dir, monkeypatch
):
    from workbench.backends.embedder import Embedder
    from workbench.runtime import load_bundle

    monkeypatch.setenv("WB_EMBED_KEY", SECRET)
    server = start_in_thread(
        str(tiny_lm_long_dir),
        served_name="tiny",
        embedder=Embedder(str(tiny_encoder_dir), cache=False),
        embedder_name="tiny-embed",
    )
    try:
        result = build_tiny_run(
            tmp_path,
            tiny_lm_long_dir,
            tiny_encoder_dir,
            "retrieval.backend=dense",
            "embedder.backend=openai",
            f"embedder.base_url={server.base_url}",
            "embedder.model=tiny-embed",
            "embedder.api_key_env=WB_EMBED_KEY",
            "embedder.batch_size=16",
            "evaluate.methods=[no_rag,standard_rag,d2rag]",
        )
        run_manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
        assert run_manifest["served_embedder"]["base_url"] == server.base_url
        assert run_manifest["cost"]["embed_texts"] >= 300  # the corpus went through the server
        bundle = tmp_path / "bundles" / "tiny" / "1.0.0"
        record = json.loads((bundle / "manifest.json").read_text())["models"]["embedder"]
        assert record["source"] == "served" and record["ref"] == "tiny-embed"
        served = record["served"]
        assert (served["base_url"], served["model"], served["api_key_env"]) == (
            server.base_url,
            "tiny-embed",
            "WB_EMBED_KEY",
        )
        assert len(served["probe"]["vectors"][0]) == served["dim"] == 32
        for path in tmp_path.rglob("*"):  # the key is never written: run directory, bundle, logs, report
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path
        assert result.stage("export").summary["bundle"] == "tiny 1.0.0"

        runtime = load_bundle(bundle)
        answer = runtime.answer("Which river flows through Paris?", "standard_rag")
        assert answer.trace and any("embedder served at" in n and "probe vectors match" in n for n in runtime.notes)
    finally:
        server.stop()

    gone = load_bundle(bundle, {"generation_cache": False})
    with pytest.raises(ServedModelError) as caught:
        gone.answer("Which river flows through Paris?", "standard_rag")
    message = str(caught.value)
    assert "\n" not in message and server.base_url in message and "unreachable" in message


def test_the_recipe_refuses_a_served_embedder_without_its_url():
    from workbench.core.errors import ConfigError
    from workbench.recipe import load_recipe

    with pytest.raises(ConfigError, match=r"embedder\.base_url"):
        load_recipe("quickstart", ["embedder.backend=openai"])


@pytest.mark.skipif(importlib.util.find_spec("infinity_emb") is None, reason="infinity_emb is not installed here")
def test_infinity_serves_minilm_as_the_in_process_embedder(tmp_path, minilm_dir):  # pragma: no cover - optional
    """Infinity (``infinity_emb v2``) serving the embedded MiniLM directory: the served backend against another
    engine. Its own runtime may round differently from transformers' fp32, hence the looser 1e-4."""
    import socket

    from workbench.backends.embedder import Embedder

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = shutil.which("infinity_emb") or sys.executable
    args = [command] if command != sys.executable else [sys.executable, "-m", "infinity_emb.cli"]
    process = subprocess.Popen(
        [*args, "v2", "--model-id", str(minilm_dir), "--served-model-name", "minilm", "--port", str(port)],
        stdout=open(tmp_path / "infinity.log", "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        env={**os.environ, "INFINITY_ANONYMOUS_USAGE_STATS": "0"},
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        served = None
        while served is None:
            try:
                served = build_served_embedder(base_url=base_url, model="minilm", retries=0, cache=False)
            except ServedModelError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(2)
        local = Embedder(str(minilm_dir), cache=False)
        assert _distance(served.encode(TEXTS[:4]), local.encode(TEXTS[:4])) <= 1e-4
    finally:
        process.terminate()
        process.wait(30)
    assert Path(tmp_path / "infinity.log").exists()
