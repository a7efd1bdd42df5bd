"""The ``serve-model`` verb: a generator (and an embedder) behind the OpenAI protocol."""

from __future__ import annotations

from typing import Annotated

import typer

from workbench.core.errors import WorkbenchError


def serve_model_command(
    model: Annotated[
        str, typer.Option("--model", help="An embedded generator name (smollm2) or a local HF model directory.")
    ],
    host: Annotated[str, typer.Option("--host", help="Interface to bind (localhost by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port (0: a free one).")] = 8000,
    served_name: Annotated[
        str | None, typer.Option("--served-name", help="The model name clients send (default: --model as given).")
    ] = None,
    max_logprobs: Annotated[
        int, typer.Option("--max-logprobs", help="Most top log-probabilities per position (400 beyond).")
    ] = 20,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Prompts per forward batch of the generator.")] = 8,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda or cuda:N.")] = "cpu",
    dtype: Annotated[str, typer.Option("--dtype", help="float32, bfloat16 or float16.")] = "float32",
    max_context: Annotated[
        int | None, typer.Option("--max-context", help="Context window (default: the model's).")
    ] = None,
    seed: Annotated[
        int, typer.Option("--seed", help="Starts the stream of fresh seeds drawn for requests that give none.")
    ] = 0,
    cache: Annotated[
        bool, typer.Option("--cache/--no-cache", help="Use the generation cache (off: every request is computed).")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds from a request's arrival to its answer (504 beyond).")
    ] = 600.0,
    max_sequences: Annotated[int, typer.Option("--max-sequences", help="Most prompts × n per request.")] = 256,
    max_request_tokens: Annotated[
        int, typer.Option("--max-request-tokens", help="Most prompts × n × max_tokens per request.")
    ] = 16384,
    max_echo_tokens: Annotated[
        int, typer.Option("--max-echo-tokens", help="Most prompt tokens one request echoes with logprobs.")
    ] = 16384,
    max_batch_tokens: Annotated[
        int,
        typer.Option(
            "--max-batch-tokens",
            help="Most tokens one batched engine call may generate across requests (prompts × n × max_tokens).",
        ),
    ] = 65536,
    continuous: Annotated[
        bool,
        typer.Option(
            "--continuous/--no-continuous",
            help="Continuous batching: requests join a running batch between decoding steps (--no-continuous:"
            " each engine call answers the requests queued when it starts).",
        ),
    ] = True,
    echo_cache_tokens: Annotated[
        int,
        typer.Option(
            "--echo-cache-tokens",
            help="Tokens of echoed prompts whose KV caches are kept across requests, so an echo continuing one (an"
            " option teacher-forced after its prompt) encodes only what is new; 0 turns it off.",
        ),
    ] = 8192,
    embedder: Annotated[
        str,
        typer.Option(
            "--embedder",
            help="Embedder served on POST /v1/embeddings: an embedded name (minilm), a local sentence-transformers"
            " directory, or 'none'.",
        ),
    ] = "minilm",
    embedder_name: Annotated[
        str | None,
        typer.Option("--embedder-name", help="The embedder's name clients send (default: --embedder as given)."),
    ] = None,
    max_embed_inputs: Annotated[
        int, typer.Option("--max-embed-inputs", help="Most texts per POST /v1/embeddings request.")
    ] = 2048,
) -> None:
    """Serve a generator (and an embedder) through the OpenAI protocol (FastAPI + uvicorn): GET /v1/models,
    POST /v1/completions, POST /v1/chat/completions, POST /v1/embeddings, GET /health.

    The reference server of docs/served-models.md: its answers are the in-process generator's (same text, log-probs
    and seeded samples) and the in-process embedder's vectors. Concurrent requests with equal decoding parameters join
    a running batch between decoding steps and leave it when done (continuous batching; --no-continuous: one
    generate call answers the requests queued when it starts), within --max-batch-tokens; stream: true is answered
    as server-sent events.
    """
    try:
        from workbench.serve.openai_server import ModelServeLimits, load_embedder, load_generator, run_model_server
    except ImportError as exc:
        raise WorkbenchError(
            f"serve-model needs fastapi and uvicorn: pip install workbench ({exc})", "serve-model"
        ) from None
    try:
        limits = ModelServeLimits(
            max_logprobs=max_logprobs,
            max_batch_prompts=max(64, batch_size),
            timeout_s=timeout,
            max_sequences=max_sequences,
            max_request_tokens=max_request_tokens,
            max_echo_tokens=max_echo_tokens,
            max_batch_tokens=max_batch_tokens,
            continuous=continuous,
            echo_cache_tokens=echo_cache_tokens,
            max_embed_inputs=max_embed_inputs,
        )
    except ValueError as exc:
        raise WorkbenchError(str(exc), "serve-model") from None
    name = served_name or model
    if embedder != "none" and (embedder_name or embedder) == name:
        raise WorkbenchError(
            f"the generator and the embedder are both named {name!r}: pass --embedder-name", "serve-model"
        )
    generator = load_generator(
        model, device=device, dtype=dtype, batch_size=batch_size, max_context=max_context, seed=seed, cache=cache
    )
    served_embedder = None if embedder == "none" else load_embedder(embedder, device=device)
    run_model_server(
        generator,
        served_name=name,
        host=host,
        port=port,
        limits=limits,
        embedder=served_embedder,
        embedder_name=(embedder_name or embedder) if served_embedder is not None else None,
    )
