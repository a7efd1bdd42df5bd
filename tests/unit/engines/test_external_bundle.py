"""Bundles on an external retriever, against the session's real PostgreSQL + pgvector: a tiny run (build_data,
evaluate, export on the tiny random models) retrieving from pgvector is exported; the manifest records the engine
(URI without credentials, the credentials variable's NAME, the index fingerprint) and no byte of the bundle holds the
password; the bundle loads and answers with passages from the engine without the corpus file; an index that differs
(a row deleted, another database) is refused at load unless allowed, then every answer says so; an engine stopped
mid-serve gives the bundle's ``on_failure`` — a closed-book answer with a note, or HTTP 503 — and ``/health`` shows
it; an export whose engine lacks the index writes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from tests.bundle_run import write_corpus
from tests.engine_servers import fresh_database, restart, stop_immediately
from workbench.backends.retrieval_engines import EngineError

SECRET = "bundle-pw-never-written-4417"
CREDENTIALS_ENV = "WB_TEST_BUNDLE_PG_SECRET"


def _as_user(uri: str, user: str) -> str:
    """``uri`` (the server's ``postgresql://postgres:@/db?host=...``) logging in as ``user``, without a password."""
    parts = urlsplit(uri)
    return urlunsplit((parts.scheme, f"{user}@{parts.netloc.rpartition('@')[2]}", parts.path, parts.query, ""))


def _sql(uri: str, statement: str) -> None:
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(statement)


def _overrides(tmp: Path, lm_dir: Path, encoder_dir: Path, uri: str, on_failure: str) -> list[str]:
    return [
        f"data.corpus={tmp / 'corpus.jsonl'}",
        f"generator.model={lm_dir}",
        f"embedder.model={encoder_dir}",
        f"run_dir={tmp}/run",
        f"report.dir={tmp}/report",
        f"export.dir={tmp}/bundles",
        "export.name=on-engine",
        f"export.on_retriever_failure={on_failure}",
        "tracker=none",
        "threads=0",
        "data.max_per_template=3",
        "stages=[build_data,evaluate,export]",
        "evaluate.methods=[no_rag,standard_rag]",
        "evaluate.limit=2",
        "evaluate.max_new_tokens=4",
        "retrieval.k=2",
        "retrieval.backend=pgvector",
        f"retrieval.connection={{uri: '{uri}', index: passages, credentials_env: {CREDENTIALS_ENV}, retries: 1,"
        " backoff_s: 0.01, timeout_s: 2}",
    ]


@pytest.fixture(scope="module")
def engine(pg_server):
    """A database holding nothing yet, and its URL for a role ``rag`` with a password."""
    admin = fresh_database(pg_server, "external_bundle_tests")
    _sql(admin, f"CREATE ROLE rag LOGIN SUPERUSER PASSWORD '{SECRET}'")
    return pg_server, admin, _as_user(admin, "rag")


@pytest.fixture(scope="module")
def bundles(engine, tmp_path_factory, tiny_lm_dir, tiny_encoder_dir):
    """The corpus pushed into pgvector with `workbench index`, one run, and its bundle exported under each failure
    policy: ``{"error": dir, "closed_book": dir}``."""
    from workbench.recipe import load_recipe
    from workbench.stages.index_engine import run_index
    from workbench.stages.runner import run_recipe

    _, _, uri = engine
    tmp = tmp_path_factory.mktemp("external-bundle")
    write_corpus(tmp / "corpus.jsonl", n=30)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CREDENTIALS_ENV, SECRET)
        for policy in ("error", "closed_book"):  # the second run reuses every stage but export
            recipe = load_recipe("quickstart", _overrides(tmp, tiny_lm_dir, tiny_encoder_dir, uri, policy))
            if policy == "error":
                run_index(recipe.config)
            run_recipe(recipe)
    (tmp / "corpus.jsonl").unlink()  # the runtime must not need it: passages come from the engine
    found = sorted((tmp / "bundles" / "on-engine").glob("[0-9]*.*.*"))
    return {"error": found[0], "closed_book": found[1], "root": tmp}


def _load(bundle: Path, monkeypatch, **overrides):
    from workbench.runtime import load_bundle

    monkeypatch.setenv(CREDENTIALS_ENV, SECRET)
    return load_bundle(bundle, overrides or None)


def test_the_manifest_records_the_engine_and_no_byte_holds_the_password(bundles, engine):
    """No file of the bundles, their archives, the run directory (its logs, config, stage outputs) or the report."""
    manifest = json.loads((bundles["error"] / "manifest.json").read_text())
    record = manifest["external_retriever"]
    assert manifest["schema_version"] == "1.7" and manifest["answering"]["retriever"] == "pgvector"
    connection = record["connection"]
    assert connection["uri"] == engine[2] and "rag@" in connection["uri"] and connection["index"] == "passages"
    assert connection["credentials_env"] == CREDENTIALS_ENV and record["on_failure"] == "error"
    fingerprint = record["fingerprint"]
    assert fingerprint["documents"] == 30 and len(fingerprint["probes"]) == 4
    assert all(len(p["ids"]) == fingerprint["k"] == 5 for p in fingerprint["probes"])
    closed = json.loads((bundles["closed_book"] / "manifest.json").read_text())
    assert closed["external_retriever"]["on_failure"] == "closed_book"
    for path in bundles["root"].rglob("*"):
        if path.is_file() and path.name.endswith(".tar.gz"):
            with tarfile.open(path) as archive:
                for member in archive.getmembers():
                    if member.isfile():
                        assert SECRET.encode() not in archive.extractfile(member).read(), member.name
        elif path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_the_bundle_answers_from_the_engine_without_the_corpus_file(bundles, monkeypatch):
    runtime = _load(bundles["error"], monkeypatch)
    answer = runtime.answer("Which river flows through Paris?", "standard_rag")
    assert answer.retrieved and len(answer.passages) == 2 and all(p["title"] for p in answer.passages)
    status = runtime.retriever_status()
    assert status["reachable"] is True and status["fingerprint"] == "match" and status["last_error"] is None
    assert SECRET not in json.dumps(status)


def test_another_index_is_refused_at_load_unless_allowed(bundles, engine, monkeypatch):
    server, admin, _ = engine
    bundle = bundles["error"]
    rag_admin = _as_user(admin, "rag")
    with psycopg.connect(rag_admin, autocommit=True) as conn:
        row = conn.execute("DELETE FROM passages WHERE id = (SELECT min(id) FROM passages) RETURNING *").fetchone()
    try:
        with pytest.raises(EngineError) as caught:
            _load(bundle, monkeypatch)
        message = str(caught.value)
        assert "(passages): not the bundle's index: it holds 29 documents, the bundle's index held 30" in message
        assert "allow_retriever_mismatch" in message and "\n" not in message
        runtime = _load(bundle, monkeypatch, allow_retriever_mismatch=True)
        answer = runtime.answer("Which river flows through Paris?", "standard_rag")
        assert any("is not the bundle's index (it holds 29 documents" in note for note in answer.notes)
        assert runtime.retriever_status()["fingerprint"].startswith("differs (allowed)")
    finally:
        with psycopg.connect(rag_admin, autocommit=True) as conn:
            conn.execute("INSERT INTO passages VALUES (%s, %s, %s, %s, %s)", row)
    other = _as_user(fresh_database(server, "another_index"), "rag")
    from tests.toy_corpus import corpus_dataset
    from tests.unit.engines.conftest import HashingEmbedder
    from workbench.backends.retrieval_engines import Connection
    from workbench.backends.retrieval_pgvector import PgvectorIndex
    from workbench.stages.index_engine import push_corpus

    monkeypatch.setenv(CREDENTIALS_ENV, SECRET)
    writer = PgvectorIndex(Connection(other, "passages"))
    dim = json.loads((bundle / "manifest.json").read_text())
    push_corpus(corpus_dataset(), writer, HashingEmbedder(_embedder_dim(dim)), batch_size=6)
    writer.close()
    with pytest.raises(EngineError, match=r"another_index \(passages\): not the bundle's index: it holds 6"):
        _load(bundle, monkeypatch, retriever_uri=other)
    command = ["infer", "--bundle", str(bundle), "--set", f"retriever_uri={other}", "Who?"]
    refused = subprocess.run([sys.executable, "-m", "workbench", *command], capture_output=True, text=True, timeout=300)
    line = refused.stderr.strip()
    assert refused.returncode == 2 and "\n" not in line and "not the bundle's index: it holds 6 documents" in line
    assert SECRET not in refused.stdout + refused.stderr


def _embedder_dim(manifest: dict) -> int:
    from workbench.backends.factory import build_embedder

    return build_embedder(manifest["models"]["embedder"]["ref"]).dim


def test_an_engine_stopped_mid_serve_follows_the_bundles_policy(bundles, engine, monkeypatch):
    from fastapi.testclient import TestClient

    from workbench.serve.app import create_app

    server, admin, _ = engine
    closed = _load(bundles["closed_book"], monkeypatch)
    strict = _load(bundles["error"], monkeypatch)
    _sql(admin, "CHECKPOINT")  # everything on disk before the hard stop
    stop_immediately(server)
    try:
        answer = closed.answer("Which river flows through Paris?", "standard_rag")
        assert not answer.retrieved and answer.fallbacks == 1
        assert any("the retriever failed" in n and "answered closed-book" in n for n in answer.notes)
        assert closed.retriever_status()["last_error"] is not None
        with TestClient(create_app(strict, warm=False)) as client:
            refused = client.post(
                "/answer", json={"question": "Which river flows through Paris?", "method": "standard_rag"}
            )
            assert refused.status_code == 503, refused.text
            detail = refused.json()["detail"]
            assert "(passages): dense search failed" in detail and SECRET not in detail
            health = client.get("/health").json()["retriever"]
            assert health["backend"] == "pgvector" and health["reachable"] is False and "count" in health["error"]
            assert health["last_error"] and health["fingerprint"] == "match" and SECRET not in json.dumps(health)
    finally:
        restart(server)
    assert strict.answer("Which river flows through Paris?", "standard_rag").retrieved  # reconnects


def test_a_milvus_lite_bundle_answers_refuses_a_changed_collection_and_exports_only_from_a_reachable_one(
    tmp_path, tiny_lm_dir, tiny_encoder_dir, monkeypatch
):
    from workbench.backends.retrieval_engines import Connection
    from workbench.backends.retrieval_milvus import open_client
    from workbench.recipe import load_recipe
    from workbench.stages.index_engine import run_index
    from workbench.stages.runner import run_recipe

    # Milvus Lite's get-by-ids fails on an id with an apostrophe (an engine bug `workbench index` meets): none here
    rows = [line for line in write_corpus(tmp_path / "all.jsonl", n=60).read_text().splitlines() if "'" not in line]
    (tmp_path / "corpus.jsonl").write_text("\n".join(rows[:30]) + "\n")
    uri = str(tmp_path / "milvus.db")
    overrides = [
        *_overrides(tmp_path, tiny_lm_dir, tiny_encoder_dir, uri, "error")[:-2],
        "retrieval.backend=milvus",
        f"retrieval.connection={{uri: '{uri}', index: passages}}",
    ]
    recipe = load_recipe("quickstart", overrides)
    run_index(recipe.config)
    run_recipe(recipe)
    (bundle,) = (tmp_path / "bundles" / "on-engine").glob("[0-9]*.*.*")
    record = json.loads((bundle / "manifest.json").read_text())["external_retriever"]
    assert record["backend"] == "milvus" and record["connection"]["uri"] == uri
    assert record["fingerprint"]["documents"] == 30
    runtime = _load(bundle, monkeypatch)
    answer = runtime.answer("Which river flows through Paris?", "standard_rag")
    assert answer.retrieved and len(answer.passages) == 2 and runtime.retriever_status()["fingerprint"] == "match"
    runtime.tools().retriever.close()
    client = open_client(Connection(uri, "passages"))
    first = record["fingerprint"]["probes"][0]["ids"][0]
    client.delete("passages", ids=[first])
    client.close()
    with pytest.raises(EngineError, match=r"\(passages\): not the bundle's index: it holds 29 documents"):
        _load(bundle, monkeypatch)
    from workbench.bundle.export import export_run

    client = open_client(Connection(uri, "passages"))
    client.drop_collection("passages")
    client.close()
    with pytest.raises(EngineError, match=r"milvus.db \(passages\): no such collection"):  # before any byte
        export_run(tmp_path / "run", root=tmp_path / "bundles", version="2.0.0")
    assert not (tmp_path / "bundles" / "on-engine" / "2.0.0").exists()
