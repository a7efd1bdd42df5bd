"""A run retrieving through ``serve-retriever``: the collect stage on the tiny Llama with ``retrieval.backend: http``
against a server built from the same recipe (:func:`~workbench.stages.retriever_service.recipe_retriever`, bm25 over
the recipe's corpus) collects exactly the rows the in-process bm25 run collects; and ``workbench serve-retriever``
as its own process answers, then stops within seconds of SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.bundle_run import write_corpus
from tests.integration.test_collect import _rows
from tests.unit.serve.test_shutdown import _server
from workbench.recipe import load_recipe
from workbench.serve.retriever_app import start_in_thread
from workbench.stages.retriever_service import recipe_retriever
from workbench.stages.runner import run_recipe

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _recipe(folder: Path, model: Path, encoder: Path, corpus: Path) -> str:
    path = folder / "http-run.yaml"
    path.write_text(
        f"""
name: http-run
stages: [build_data, collect]
run_dir: {folder}/run
tracker: none
generator: {{model: {model}, batch_size: 8}}
embedder: {{model: {encoder}}}
data: {{max_per_template: 20, corpus: {corpus}}}
collect: {{splits: [test], limit: 3, features: [confidence], labels: [rag], max_new_tokens: 4}}
retrieval: {{backend: bm25, k: 2}}
"""
    )
    return str(path)


def test_collect_through_serve_retriever_equals_in_process(tmp_path, tiny_lm_long_dir, tiny_encoder_dir):
    corpus = write_corpus(tmp_path / "corpus.jsonl", 100)
    folders = {name: tmp_path / name for name in ("local", "served")}
    recipes = {}
    for name, folder in folders.items():
        folder.mkdir()
        recipes[name] = _recipe(folder, tiny_lm_long_dir, tiny_encoder_dir, corpus)
    served = recipe_retriever(load_recipe(recipes["local"], []).config)
    run_recipe(load_recipe(recipes["local"], []))
    with start_in_thread(served) as server:
        http = ["retrieval.backend=http", f"retrieval.connection.uri={server.retrieve_url}"]
        run_recipe(load_recipe(recipes["served"], [*http, "retrieval.connection.channel=lexical"]))
        health = httpx.get(f"{server.url}/health").json()
    rows = {name: _rows(folder / "run" / "stages" / "collect", "test") for name, folder in folders.items()}
    assert len(rows["local"]) == 3 and rows["served"] == rows["local"]
    assert health["queries"] >= 3 and health["failures"] == 0 and health["passages"] == 100


SERVE = """
import sys
from workbench.cli import main
recipe, *options, port = sys.argv[1:]
sys.argv = ["workbench", "serve-retriever", recipe, *options, "--port", port]
main()
"""


def test_the_command_serves_a_recipe_and_stops_on_sigterm(tmp_path, tiny_lm_long_dir, tiny_encoder_dir):
    recipe = _recipe(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, write_corpus(tmp_path / "corpus.jsonl", 30))
    with _server(SERVE, recipe) as (process, url):
        health = httpx.get(f"{url}/health").json()
        assert health["backend"] == "bm25" and health["passages"] == 30
        answer = httpx.post(f"{url}/retrieve", json={"queries": ["Who was Albert Einstein?"], "return_scores": True})
        assert answer.status_code == 200 and len(answer.json()["result"][0]) == 3  # the default topk
        began = time.monotonic()
        process.send_signal(signal.SIGTERM)
        status = process.wait(timeout=30)
        assert time.monotonic() - began < 5.0
        output = process.stdout.read().decode(errors="replace")
        # uvicorn shuts down gracefully, then re-raises the signal it caught (status -15)
        assert status in (0, -signal.SIGTERM) and "Traceback" not in output, output[-2000:]
        assert f"workbench serve-retriever: bm25 at {url}/retrieve" in output


def test_the_command_refuses_bad_limits_in_one_line(tmp_path, tiny_lm_long_dir, tiny_encoder_dir):
    recipe = _recipe(tmp_path, tiny_lm_long_dir, tiny_encoder_dir, write_corpus(tmp_path / "corpus.jsonl", 5))
    done = subprocess.run(
        [sys.executable, "-c", SERVE, recipe, "--default-topk", "10", "--max-topk", "5", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "error: serve-retriever: default_topk (10) exceeds max_topk (5)"
