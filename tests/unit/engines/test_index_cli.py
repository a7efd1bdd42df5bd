"""``workbench index`` against the session's real PostgreSQL: a corpus file pushed (a verified count), a re-run
writing nothing, ``--adopt`` checking the index, an in-process backend refused, and (the command line itself) an
unreachable engine as one line with exit status 2 naming the URI without its password."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.engine_servers import fresh_database
from tests.toy_corpus import PASSAGES
from workbench.core.errors import ConfigError
from workbench.recipe import load_recipe
from workbench.stages.index_engine import run_index

SECRET = "pw-never-written-7731"


def recipe(tmp_path, encoder_dir, uri: str, backend: str = "pgvector") -> str:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"doc_id": d, "title": t, "text": x}) + "\n" for d, t, x in PASSAGES))
    path = tmp_path / "index.yaml"
    path.write_text(
        f"name: index-test\nstages: [build_data]\ndata: {{corpus: {corpus}}}\nembedder: {{model: {encoder_dir}}}\n"
        f"retrieval:\n  backend: {backend}\n"
        f"  connection: {{uri: '{uri}', index: passages, batch_size: 4, credentials_env: WB_TEST_SECRET,"
        " retries: 1, backoff_s: 0.01, timeout_s: 2}\n"
    )
    return str(path)


def wb(*args):
    env = {**os.environ, "WB_TEST_SECRET": SECRET}
    return subprocess.run(
        [sys.executable, "-m", "workbench", "index", *args], capture_output=True, text=True, timeout=300, env=env
    )


@pytest.fixture(scope="module")
def pg_uri(pg_server):
    return fresh_database(pg_server, "index_cli_tests")


def test_index_pushes_once_then_adopts(tmp_path, tiny_encoder_dir, pg_uri, monkeypatch, capsys):
    monkeypatch.setenv("WB_TEST_SECRET", SECRET)
    config = load_recipe(recipe(tmp_path, tiny_encoder_dir, pg_uri)).config
    first = run_index(config).line()
    assert "6 passages: 6 written" in first and "the index holds 6" in first
    again = run_index(config).line()
    assert "0 written" in again and "6 already there" in again
    assert run_index(config, adopt=True).line().startswith("adopted: the index holds 6")
    assert SECRET not in "".join(capsys.readouterr())


def test_index_refuses_an_in_process_backend_and_an_unreachable_engine(tmp_path, tiny_encoder_dir):
    with pytest.raises(ConfigError, match="bm25 is built in this process"):
        run_index(load_recipe(recipe(tmp_path, tiny_encoder_dir, "postgresql://x@h/db", backend="bm25")).config)
    down = wb(recipe(tmp_path, tiny_encoder_dir, f"postgresql://bob:{SECRET}@127.0.0.1:9/db"))
    assert down.returncode == 2, down.stderr
    line = down.stderr.strip()
    assert "\n" not in line and "postgresql://bob:***@127.0.0.1:9/db (passages): cannot connect" in line
    assert SECRET not in line
