"""The faults of issue 43 against the real PostgreSQL + pgvector, through the command line's own entry point: the
server killed in the middle of ``collect`` (the finished chunks kept, one line naming the URI, exit 2; after a restart
the re-run resumes without redoing them), a password the server refuses (one line, exit 2, not retried), a statement
timeout (bounded retries, then one line), and the password of a whole run never written to its directory, its log or
its output. The missing table, a wrong field mapping and a dimension mismatch are in test_pgvector / test_milvus."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from tests.engine_servers import restart, stop_immediately
from tests.recipe_overrides import run_overrides
from workbench.backends.retrieval_engines import Connection, EngineError
from workbench.backends.retrieval_pgvector import PgvectorRetriever

SECRET = "pw-faults-never-written-5521"
ROLE = "wb_secret"


@pytest.fixture(scope="module")
def secret_db(pg_server):
    """Database ``faults`` owned by role ``wb_secret``, which must give its password (scram) on the socket; returns
    the URI without the password and the server."""
    admin = pg_server.get_uri()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{SECRET}'")
        conn.execute(f"CREATE DATABASE faults OWNER {ROLE}")
    with psycopg.connect(pg_server.get_uri("faults"), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    hba = Path(pg_server.pgdata) / "pg_hba.conf"
    hba.write_text(f"local all {ROLE} scram-sha-256\n" + hba.read_text())  # before the catch-all "trust" line
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SELECT pg_reload_conf()")
    parts = urlsplit(pg_server.get_uri("faults"))
    return f"postgresql://{ROLE}@{parts.path}?{parts.query}", pg_server


def cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``workbench <args>`` through the console entry point in this process: (exit status, stdout, stderr)."""
    from workbench.cli import main

    monkeypatch.setattr(sys, "argv", ["workbench", *args])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error_line(err: str) -> str:
    """The one ``error: ...`` line of a failed command's stderr (progress bars aside)."""
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    return errors[0]


def overrides(tmp_path, lm_dir, uri: str) -> list[str]:
    from tests.bundle_run import write_corpus

    corpus = write_corpus(tmp_path / "corpus.jsonl", n=30)
    return run_overrides(
        tmp_path,
        lm_dir,
        f"data.corpus={corpus}",
        "stages=[build_data,collect,evaluate]",
        "collect.splits=[calib]",
        "collect.limit=4",
        "collect.batch_questions=2",
        "collect.features=[confidence,dtr_nll]",
        "collect.labels=[rag]",
        "collect.max_new_tokens=4",
        "retrieval.k=2",
        "retrieval.backend=pgvector",
        f"retrieval.connection={{uri: '{uri}', index: passages, channel: lexical, credentials_env: WB_FAULTS_PW,"
        " retries: 1, backoff_s: 0.01, timeout_s: 2}",
        "evaluate.limit=2",
        "evaluate.max_new_tokens=4",
        "evaluate.methods=[standard_rag]",
        per_template=20,
    )


def test_a_server_killed_mid_collect_keeps_rows_and_the_rerun_resumes(
    tmp_path, monkeypatch, capsys, secret_db, tiny_lm_long_dir
):
    """Also the credential check of a whole run: the password in ``credentials_env`` reaches the server, and no
    file under the run, report and log directories, nor anything printed, holds it."""
    uri, server = secret_db
    monkeypatch.setenv("WB_FAULTS_PW", SECRET)
    args = overrides(tmp_path, tiny_lm_long_dir, uri)
    code, out, err = cli(monkeypatch, capsys, "index", "quickstart", *args)
    assert code == 0 and "30 passages: 30 written" in out, err
    searched: list[list[str]] = []
    killed: list[bool] = []
    real = PgvectorRetriever._engine_search

    def kill_on_the_second_batch(self, queries, k):
        searched.append(list(queries))
        if len(searched) == 2 and not killed:
            killed.append(True)
            stop_immediately(server)
        return real(self, queries, k)

    monkeypatch.setattr(PgvectorRetriever, "_engine_search", kill_on_the_second_batch)
    try:
        code, out, err = cli(monkeypatch, capsys, "run", "quickstart", *args)
    finally:
        restart(server)
    assert code == 2 and one_error_line(err).startswith(
        f"error: postgresql://{ROLE}@/faults (passages): lexical search failed after 2 tries: OperationalError"
    ), err
    chunks = sorted((tmp_path / "run" / "scratch").glob("collect-*/calib/chunk-*.jsonl"))
    assert [c.name for c in chunks] == ["chunk-0000000.jsonl"]  # the first batch's rows are kept
    kept = [json.loads(line) for line in chunks[0].read_text().splitlines()]
    first_batch = searched[0]

    searched.clear()
    code, out, err = cli(monkeypatch, capsys, "run", "quickstart", *args)
    assert code == 0, err
    again = {q for batch in searched for q in batch}
    assert again and not again & set(first_batch)  # the kept rows were not collected again
    import datasets

    calib = datasets.load_from_disk(str(tmp_path / "run" / "stages" / "collect" / "calib")).to_list()
    assert [r["position"] for r in calib] == [0, 1, 2, 3]
    assert [(r["question"], r["retrieved_ids"], r["greedy_answer"]) for r in calib[:2]] == [
        (r["question"], r["retrieved_ids"], r["greedy_answer"]) for r in kept
    ]

    secret = SECRET.encode()
    leaks = [p for p in tmp_path.rglob("*") if p.is_file() and secret in p.read_bytes()]
    assert leaks == [], leaks
    assert SECRET not in out + err


def test_a_refused_password_is_one_line_and_exit_2_without_retries(
    tmp_path, monkeypatch, capsys, secret_db, tiny_lm_long_dir
):
    uri, _ = secret_db
    wrong = "WRONG-pw-0093"
    monkeypatch.setenv("WB_FAULTS_PW", wrong)
    args = overrides(tmp_path, tiny_lm_long_dir, uri)
    for verb in ("index", "run"):
        began = time.perf_counter()
        code, out, err = cli(monkeypatch, capsys, verb, "quickstart", *args)
        line = one_error_line(err)
        assert code == 2 and line.startswith(f"error: postgresql://{ROLE}@/faults (passages)"), (verb, err)
        assert "authentication failed" in line and "tries" not in line, line
        assert wrong not in out + err and SECRET not in out + err
        assert time.perf_counter() - began < 60


def test_a_statement_timeout_is_retried_a_bounded_number_of_times_then_one_line(secret_db, monkeypatch):
    """A view whose every row sleeps: the query outlives ``timeout_s`` (PostgreSQL's statement_timeout)."""
    from tests.toy_corpus import corpus_dataset
    from tests.unit.engines.conftest import HashingEmbedder
    from workbench.backends.retrieval_pgvector import PgvectorIndex
    from workbench.stages.index_engine import push_corpus

    uri, _ = secret_db
    monkeypatch.setenv("WB_FAULTS_PW", SECRET)
    base = Connection(uri, "toy", credentials_env="WB_FAULTS_PW")
    writer = PgvectorIndex(base)
    push_corpus(corpus_dataset(), writer, HashingEmbedder(), batch_size=8)
    writer.close()
    with psycopg.connect(uri, password=SECRET, autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION slowly(t text) RETURNS text LANGUAGE sql VOLATILE AS"
            " $$ SELECT pg_sleep(0.3); SELECT t $$"
        )
        conn.execute("CREATE OR REPLACE VIEW toy_slow AS SELECT id, slowly(text) AS text FROM toy")
    slow = Connection(
        uri, "toy_slow", credentials_env="WB_FAULTS_PW", channel="lexical", timeout_s=1, retries=2, backoff_s=0.01
    )
    engine = PgvectorRetriever(corpus_dataset(), slow)
    began = time.perf_counter()
    with pytest.raises(EngineError) as caught:
        engine.search(["Who wrote Hamlet?"], k=2)
    spent = time.perf_counter() - began
    message = str(caught.value)
    assert "\n" not in message and SECRET not in message
    assert f"postgresql://{ROLE}@/faults (toy_slow): lexical search failed after 3 tries: QueryCanceled" in message
    assert "statement timeout" in message
    assert 3.0 <= spent < 8.0  # three tries of about timeout_s each, no more
    engine.close()
