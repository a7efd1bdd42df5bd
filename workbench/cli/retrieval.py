"""Verbs on the recipe's retrieval engine: ``index`` (push the corpus into it) and ``serve-retriever``."""

from __future__ import annotations

from typing import Annotated

import typer

from workbench.cli.output import VerboseOption, silence_third_party
from workbench.core.errors import WorkbenchError


def index_command(
    recipe: Annotated[str, typer.Argument(help="Recipe name or YAML path (retrieval.backend: pgvector | milvus).")],
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides.")] = None,
    adopt: Annotated[
        bool, typer.Option("--adopt", help="Write nothing: check the existing index against the corpus and use it.")
    ] = False,
) -> None:
    """Push the recipe's corpus (chunked as its data section says, embedded by its embedder) into its retrieval
    engine: batched, resumable and idempotent by passage id, a verified count at the end (docs/retrieval.md)."""
    from workbench.recipe import load_recipe
    from workbench.stages.index_engine import run_index

    loaded = load_recipe(recipe, overrides or [])
    typer.echo(run_index(loaded.config, adopt=adopt).line())


def serve_retriever_command(
    recipe: Annotated[str, typer.Argument(help="Recipe name or YAML path: its retrieval section and corpus.")],
    overrides: Annotated[list[str] | None, typer.Argument(help="key=value overrides.")] = None,
    host: Annotated[str, typer.Option("--host", help="Interface to bind (localhost by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port (0: a free one).")] = 8000,
    max_queries: Annotated[int, typer.Option("--max-queries", help="Most queries per request (422 beyond).")] = 256,
    max_topk: Annotated[int, typer.Option("--max-topk", help="Most hits per query (422 beyond).")] = 100,
    default_topk: Annotated[
        int, typer.Option("--default-topk", help="Hits per query when a request's topk is null or 0.")
    ] = 3,
    max_query_chars: Annotated[
        int, typer.Option("--max-query-chars", help="Longest query in characters (422 beyond).")
    ] = 2000,
    max_body: Annotated[int, typer.Option("--max-body", help="Largest request body in bytes (413 beyond).")] = 1 << 20,
    max_concurrency: Annotated[
        int,
        typer.Option(
            "--max-concurrency",
            help="Requests searched at once (an engine already runs one request's queries concurrently, "
            "retrieval.connection.max_concurrency at a time); more only for a retriever safe on several threads.",
        ),
    ] = 1,
    max_waiting: Annotated[
        int, typer.Option("--max-waiting", help="Most requests waiting for a search (503 beyond).")
    ] = 256,
    verbose: VerboseOption = False,
) -> None:
    """Serve the recipe's retriever (any retrieval.backend, over the recipe's corpus) on the POST /retrieve shape of
    FlashRAG / Search-R1 retriever servers: POST /retrieve, GET /health (docs/retrieval.md)."""
    silence_third_party(verbose)
    try:
        from workbench.serve.retriever_app import RetrieverServeLimits, run_retriever_server
    except ImportError as exc:
        raise WorkbenchError(
            f"serve-retriever needs fastapi and uvicorn: pip install workbench ({exc})", "serve-retriever"
        ) from None
    from workbench.recipe import load_recipe
    from workbench.stages.retriever_service import recipe_retriever

    config = load_recipe(recipe, overrides or []).config
    try:
        limits = RetrieverServeLimits(  # checked before the index is built: a bad flag fails at once
            max_queries=max_queries,
            max_topk=max_topk,
            default_topk=default_topk,
            max_query_chars=max_query_chars,
            max_body_bytes=max_body,
            max_concurrency=max_concurrency,
            max_waiting=max_waiting,
        )
    except ValueError as exc:
        raise WorkbenchError(str(exc), "serve-retriever") from None
    run_retriever_server(recipe_retriever(config), host=host, port=port, limits=limits)
