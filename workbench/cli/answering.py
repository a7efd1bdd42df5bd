"""Verbs that answer with a bundle: ``infer`` and ``serve``, and the runtime overrides both take as flags."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer

from workbench.cli.output import VerboseOption, silence_third_party
from workbench.core.errors import WorkbenchError

BaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        help="Answer with the bundle's model served at this OpenAI-compatible URL (…/v1) instead of loading it; "
        "its probe answers must match the bundle's (docs/served-models.md).",
    ),
]


ServedModelOption = Annotated[
    str | None, typer.Option("--served-model", help="The model's name at --base-url (default: the bundle's).")
]


ApiKeyEnvOption = Annotated[
    str | None, typer.Option("--api-key-env", help="NAME of the environment variable holding --base-url's key.")
]


OnOodOption = Annotated[
    str | None,
    typer.Option(
        "--on-ood",
        help="What an out-of-distribution flag does: flag (default: only report it), retrieve (D²-RAG retrieves), "
        "refuse (no answer); see docs/ood.md.",
    ),
]


def runtime_overrides(
    values: list[str] | None, classifier: str | None, device: str | None, **served: str | None
) -> dict:
    """``--set key=value`` overrides (YAML values, dotted keys for methods) as a RuntimeOptions mapping; ``served``
    holds ``base_url`` / ``served_model`` / ``api_key_env`` / ``on_ood`` from their options (None: not given)."""
    from workbench.core.config import parse_override

    overrides: dict = {}
    for text in values or []:
        path, value = parse_override(text)
        node = overrides
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise WorkbenchError(f"cannot set '{'.'.join(path)}'", "command line")
        node[path[-1]] = value
    if classifier:
        overrides["classifier"] = classifier
    if device:
        overrides["device"] = device
    overrides.update({key: value for key, value in served.items() if value is not None})
    return overrides


RUNTIME_FLAGS = {
    "classifier": "--classifier",
    "device": "--device",
    "base_url": "--base-url",
    "served_model": "--served-model",
    "api_key_env": "--api-key-env",
    "on_ood": "--on-ood",
}
"""The runtime overrides ``infer`` and ``serve`` take as flags of their own (the others come from ``--set``)."""


def load_runtime(
    bundle: Path, values: list[str] | None, classifier: str | None, device: str | None, **served: str | None
) -> Any:
    """``load_bundle`` with the command line's runtime overrides (:func:`runtime_overrides`); a refused override is
    named as the user typed it — ``--set methods.dtr.tau``, ``--device`` — not as the runtime's ``overrides.*`` key
    (nor the recipe key ``evaluate.options.*`` a method option has in a recipe)."""
    from workbench.core.errors import ConfigError
    from workbench.runtime import load_bundle

    try:
        return load_bundle(bundle, runtime_overrides(values, classifier, device, **served))
    except ConfigError as exc:
        flags = {key for key, value in {"classifier": classifier, "device": device, **served}.items() if value}
        typed = typed_option(exc, flags)
        if typed is None:
            raise
        raise ConfigError(exc.what, typed) from None


def typed_option(exc: WorkbenchError, flags: set[str]) -> str | None:
    """The command-line option behind an error at ``overrides[.<key>]`` (``flags``: the runtime keys given by their
    own flag, :data:`RUNTIME_FLAGS`; every other key came from ``--set``); None for an error elsewhere."""

    where = str(exc.where or "")
    if where != "overrides" and not where.startswith("overrides."):
        return None
    key = where.removeprefix("overrides").lstrip(".")
    if not key:  # the options' type check names the key in its message: "'batch_size' expects int, got 'x'"
        named = re.search(r"'([A-Za-z_][\w.]*)'", exc.what)
        key = named.group(1) if named else ""
    if key.split(".")[0] in flags:
        return RUNTIME_FLAGS[key.split(".")[0]]
    return f"--set {key}" if key else "--set"


def infer_command(
    bundle: Annotated[Path, typer.Option("--bundle", help="A bundle directory or its .tar.gz.")],
    questions: Annotated[list[str] | None, typer.Argument(help="Question(s) to answer.")] = None,
    method: Annotated[
        str | None, typer.Option("--method", help="Method (default: the bundle's default method).")
    ] = None,
    input_file: Annotated[
        Path | None,
        typer.Option("--input", help="JSONL file of {id, question} (a regular file; other fields are ignored)."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", help="JSONL file of answers (a regular file); an existing one is resumed, one run at a time."
        ),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(
            "--batch-size",
            help="Questions answered together (default: 1 with --input, so a kill loses at most the question in "
            "flight; the bundle's batch size for questions given on the command line).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print each answer as JSON with its trace.")] = False,
    traces: Annotated[bool, typer.Option("--traces", help="Write full traces into --output.")] = False,
    classifier: Annotated[str | None, typer.Option("--classifier", help="numpy (default) or onnx.")] = None,
    device: Annotated[str | None, typer.Option("--device", help="cpu, cuda, cuda:N or auto.")] = None,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="Runtime override key=value (see docs/bundles.md).")
    ] = None,
    base_url: BaseUrlOption = None,
    served_model: ServedModelOption = None,
    api_key_env: ApiKeyEnvOption = None,
    on_ood: OnOodOption = None,
    verbose: VerboseOption = False,
) -> None:
    """Answer questions with a bundle: given on the command line, or a JSONL file (--input / --output, resumable)."""
    silence_third_party(verbose)
    from workbench.methods.registry import default_method, uses_decision_policy
    from workbench.runtime.batch_file import answer_file, json_line

    if bool(questions) == bool(input_file):
        raise WorkbenchError("give question(s) or --input FILE (with --output FILE), not both or neither", "infer")
    if input_file is not None and output is None:
        raise WorkbenchError("--input needs --output (the answers file, resumed if it exists)", "infer")
    if batch_size is not None and batch_size < 1:
        raise WorkbenchError("--batch-size must be >= 1", "infer")
    served = {"base_url": base_url, "served_model": served_model, "api_key_env": api_key_env, "on_ood": on_ood}
    runtime = load_runtime(bundle, overrides, classifier, device, **served)  # loads no model
    if input_file is not None:
        # every refusal (method, input, rows already written) comes before a model is loaded, and none is loaded
        # when nothing is left to answer
        done = answer_file(runtime, input_file, output, method=method, batch_size=batch_size or 1, traces=traces)
        typer.echo(
            f"{done.answered} answered, {done.skipped} already in {done.output} (of {done.total}) "
            f"with {runtime.name} {runtime.version} ({done.method})"
        )
        return
    if not as_json and uses_decision_policy(method or default_method(runtime.methods)):
        decision = runtime.info().get("decision")  # the manifest's record, as the card and `bundles` show it
        if decision:
            typer.echo(f"{runtime.name} {runtime.version}: {decision['summary']}")
    for answer in runtime.answer_many(list(questions or []), method, batch_size=batch_size):
        if as_json:
            typer.echo(json_line(answer.to_dict()))  # one line even when the answer holds U+2028 / U+2029
            continue
        decision = f" P(correct) {answer.p_correct:.3f} vs τ {answer.tau:.3f}," if answer.p_correct is not None else ""
        used = ", ".join(p["title"] or p["id"] for p in answer.passages[:3]) or "none"
        typer.echo(f"Q: {answer.question}\nA: {answer.text}")
        typer.echo(
            f"   [{answer.method}]{decision} retrieved: {'yes' if answer.retrieved else 'no'} ({used}), "
            f"{answer.lm_calls:g} LM calls, {answer.tokens:.0f} tokens, {answer.latency_s:.2f} s"
        )
        if answer.ood is not None and answer.ood["flag"]:
            typer.echo(f"   out of distribution: {', '.join(answer.ood['checks'])} ({answer.ood['action']})")


def serve_command(
    bundle: Annotated[Path, typer.Option("--bundle", help="A bundle directory or its .tar.gz.")],
    host: Annotated[str, typer.Option("--host", help="Interface to bind (localhost by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8000,
    max_batch: Annotated[int, typer.Option("--max-batch", help="Most questions in one POST /answer.")] = 32,
    max_body: Annotated[int, typer.Option("--max-body", help="Largest request body in bytes (413 beyond).")] = 65536,
    max_question_chars: Annotated[
        int, typer.Option("--max-question-chars", help="Longest question in characters (422 beyond).")
    ] = 2000,
    max_question_tokens: Annotated[
        int, typer.Option("--max-question-tokens", help="Longest question in the generator's tokens (422 beyond).")
    ] = 256,
    max_queue: Annotated[
        int, typer.Option("--max-queue", help="Most questions waiting over all requests (503 + Retry-After beyond).")
    ] = 128,
    max_batch_questions: Annotated[
        int | None,
        typer.Option(
            "--max-batch-questions",
            help="Most questions answered in one batch across requests (default: the runtime's batch size).",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds from a request's arrival to its answer (504 beyond).")
    ] = 120.0,
    classifier: Annotated[str | None, typer.Option("--classifier", help="numpy (default) or onnx.")] = None,
    device: Annotated[str | None, typer.Option("--device", help="cpu, cuda, cuda:N or auto.")] = None,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="Runtime override key=value (see docs/bundles.md).")
    ] = None,
    warm: Annotated[
        bool,
        typer.Option(
            "--warm/--lazy",
            help="Warm up once bound: load every method's models and answer one question with each; GET /ready says "
            "200 when done (GET /health answers from the start). --lazy: ready at once, each method loads on its "
            "first question.",
        ),
    ] = True,
    base_url: BaseUrlOption = None,
    served_model: ServedModelOption = None,
    api_key_env: ApiKeyEnvOption = None,
    on_ood: OnOodOption = None,
    answer_log: Annotated[
        Path | None,
        typer.Option(
            "--answer-log",
            help="Append one JSON line per answer (features, P(correct), decision, OOD flag; no question text) for "
            "`workbench monitor` (docs/monitoring.md).",
        ),
    ] = None,
    verbose: VerboseOption = False,
) -> None:
    """Serve a bundle as a JSON HTTP API (FastAPI + uvicorn): GET /health, GET /ready, GET /methods, POST /answer,
    /docs, /redoc, and drift monitoring: GET /metrics (Prometheus), GET /drift.

    Requests are queued (bounded by --max-queue) and those waiting for the same method are answered together, up to
    --max-batch-questions questions per batch; see docs/bundles.md for the status codes.
    """
    silence_third_party(verbose)
    try:
        from workbench.serve import ServeLimits, run_server
    except ImportError as exc:
        raise WorkbenchError(f"serve needs fastapi and uvicorn: pip install workbench ({exc})", "serve") from None
    served = {"base_url": base_url, "served_model": served_model, "api_key_env": api_key_env, "on_ood": on_ood}
    runtime = load_runtime(bundle, overrides, classifier, device, **served)
    # The runtime answers in forward batches of its batch size: a larger cross-request batch only delays the first
    # answers of it, a smaller one leaves batch rows empty.
    batch_size = runtime.options.batch_size or int(runtime.manifest["answering"].get("batch_size", 8))
    limits = ServeLimits(  # checked before the models load: a bad flag fails at once
        max_batch=max_batch,
        max_body_bytes=max_body,
        max_question_chars=max_question_chars,
        max_question_tokens=max_question_tokens,
        max_queue=max_queue,
        max_batch_questions=max_batch_questions if max_batch_questions is not None else batch_size,
        timeout_s=timeout,
    )
    run_server(runtime, host=host, port=port, limits=limits, warm=warm, answer_log=answer_log)
