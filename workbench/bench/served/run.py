"""Stage ``bench_served``: the same features collected in-process and through OpenAI-compatible servers.

For the first ``bench_served.questions`` questions of a split it collects ``bench_served.features`` three ways and
compares them, in one run on one machine:

1. **in-process** — the generator loaded here, batched (``generator.batch_size``), no generation cache;
2. **serve-model** — ``workbench serve-model`` started as a separate process on the same model, reached by the served
   backend at each concurrency of ``bench_served.concurrency`` (requests in flight): ``serve_model`` with request-level
   batching (``--no-continuous``), ``serve_model_continuous`` with continuous batching (the server's default), each
   when ``bench_served.engines`` names it;
3. **llama.cpp** — ``llama_cpp``: ``llama-cpp-python``'s OpenAI-compatible server on the embedded GGUF file (the
   quantised weights the embedded SmolLM2 is converted from), when the package is installed; ``llama_server``:
   llama.cpp's own ``llama-server`` on the same file with ``bench_served.llama_server_slots`` parallel slots, when
   the binary ``bench_served.llama_server`` is found; else one line says it was not run.

Per engine: the probed capabilities, questions/s per concurrency, streamed one-question chat requests per
concurrency (time to first token, latency, tokens/s: :mod:`workbench.bench.served.streamed`), and per feature the
agreement with the in-process values — Spearman rank correlation, the largest absolute difference, and AUROC of
the greedy answer's correctness in-process vs served. Features an engine cannot serve are listed with the
capability it lacks. Output: ``bench.json``; the report stage ``report_bench_served`` turns it into tables and
plots (:mod:`workbench.bench.served.report`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

from workbench.assets import EMBEDDED_ADAPTERS, EMBEDDED_GENERATORS, package_dir
from workbench.backends.capabilities import missing_capabilities
from workbench.backends.factory import build_generator, build_served_generator
from workbench.backends.lora import resolve_model
from workbench.bench.harness import thread_counts, timed
from workbench.bench.report import write_bench_report
from workbench.bench.served.report import write_served_report
from workbench.bench.served.streamed import stream_load
from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError
from workbench.methods.backend_needs import feature_needs
from workbench.metrics.qa import score_answer
from workbench.metrics.ranking import auroc
from workbench.metrics.rejection import spearman
from workbench.serve.load import free_port, server_process
from workbench.stages.collect.run import stat_settings
from workbench.stages.context import StageContext
from workbench.uncertainty.calculators import UNAVAILABLE_STATS, compute_stats
from workbench.uncertainty.features import compute_features, required_stats

LLAMA_CPP_NAME = "gguf"
"""The name llama.cpp's server serves the GGUF file under (``--model_alias``)."""


def _collect(generator: Any, rows: list[dict], features: list[str], ctx: StageContext) -> list[dict[str, float]]:
    """The features of every row, by the stats graph (as the collect stage computes them)."""

    needed = (required_stats(features) - UNAVAILABLE_STATS) | {"greedy_text", "greedy_logprobs", "greedy_eos"}
    stats = compute_stats(
        rows,
        needed,
        generator=generator,
        judge=ctx.resources.judge(),
        embedder=ctx.resources.embedder(),
        settings=stat_settings(ctx.config.collect),
    )
    out = []
    for st in stats:
        values = compute_features(st, features, on_missing="nan")
        values["_greedy"] = str(st.get("greedy_text", ""))
        out.append(values)
    return out


def _timed_collect(generator: Any, rows: list[dict], features: list[str], ctx: StageContext) -> tuple[list, float]:
    """One timed collection of ``rows`` (after the caller's warm-up on two rows: a server's whole rate is one pass)."""
    run = timed(lambda: _collect(generator, rows, features, ctx))
    return run.value, run.seconds


def agreement(exact: list[dict], served: list[dict], features: list[str], labels: list[float]) -> dict[str, Any]:
    """Per feature: Spearman ρ between the in-process and the served values, the largest absolute difference, and
    the AUROC of each against ``labels`` (and their difference); plus the share of identical greedy answers."""

    out: dict[str, Any] = {
        "greedy_identical": float(np.mean([a["_greedy"] == b["_greedy"] for a, b in zip(exact, served, strict=True)]))
    }
    for name in features:
        x = np.array([row[name] for row in exact], dtype=float)
        y = np.array([row[name] for row in served], dtype=float)
        both = np.isfinite(x) & np.isfinite(y)
        a_exact, a_served = auroc(x, labels), auroc(y, labels)
        constant = both.sum() < 2 or np.ptp(x[both]) == 0 or np.ptp(y[both]) == 0
        out[name] = {
            "spearman": float("nan") if constant else spearman(x[both], y[both]),
            "max_abs_diff": float(np.max(np.abs(x[both] - y[both]))) if both.any() else float("nan"),
            "auroc_in_process": a_exact,
            "auroc_served": a_served,
            "auroc_diff": a_served - a_exact,
        }
    return out


def servable_features(features: list[str], capabilities: Any) -> tuple[list[str], dict[str, list[str]]]:
    """``(servable, skipped)``: the ``features`` a server with ``capabilities`` can give, in order, and each other
    feature with the capabilities it lacks (hidden states, attention, per-step logits are not in the protocol)."""

    skipped = {f: missing_capabilities(feature_needs(f), capabilities) for f in features}
    skipped = {f: m for f, m in skipped.items() if m}
    return [f for f in features if f not in skipped], skipped


def _bench_engine(
    ctx: StageContext,
    name: str,
    base_url: str,
    served_name: str,
    rows: list[dict],
    exact: list[dict],
    labels: list[float],
    in_process_rate: float,
) -> dict[str, Any]:
    """Capabilities, throughput per concurrency and agreement of one running server."""

    section, features = ctx.config.bench_served, list(ctx.config.bench_served.features)
    # every client of this server: uncached, the recipe's tokenizer, seed and prompt format
    connect = functools.partial(
        build_served_generator,
        base_url=base_url,
        model=served_name,
        tokenizer=ctx.config.generator.model,
        top_logprobs=section.top_logprobs,
        cache=False,
        seed=ctx.config.seed,
        prompt_format=ctx.config.generator.prompt_format,
    )
    result: dict[str, Any] = {"engine": name, "rates": {}}
    probe_generator = None
    for concurrency in section.concurrency:
        generator = connect(
            max_concurrency=concurrency,
            batch_size=ctx.config.generator.batch_size,
            capabilities=getattr(probe_generator, "capabilities", None),
            probe_record=getattr(probe_generator, "probe_record", None),
        )
        probe_generator = probe_generator or generator
        servable, skipped = servable_features(features, generator.capabilities)
        _collect(generator, rows[:2], servable, ctx)  # warm the server and this client
        values, seconds = _timed_collect(generator, rows, servable, ctx)
        rate = len(rows) / seconds
        result["rates"][str(concurrency)] = {"questions_per_s": rate, "seconds": seconds}
        ctx.log.info("%s at concurrency %d: %.2f questions/s", name, concurrency, rate)
        result.update(
            capabilities=generator.capabilities.to_dict(),
            skipped=skipped,
            agreement=agreement(exact, values, servable, labels),
            option_reads=dict(generator.option_reads),
        )
        generator.close()
    questions = [str(row["question"]) for row in rows]
    result["streamed"] = {}
    for concurrency in section.concurrency:  # a chat front-end's load: one question per streamed request
        requests = max(section.stream_requests, concurrency)
        load = stream_load(
            base_url, served_name, questions, concurrency=concurrency, requests=requests,
            max_tokens=section.stream_max_tokens,
        )  # fmt: skip
        result["streamed"][str(concurrency)] = load
        ctx.log.info(
            "%s streamed at concurrency %d: first token after %s s (p50)", name, concurrency, load["ttft_p50_s"]
        )
    top = str(max(section.concurrency))
    low = str(min(section.concurrency))
    result["vs_in_process"] = result["rates"][top]["questions_per_s"] / in_process_rate
    result["vs_own_lowest"] = result["rates"][top]["questions_per_s"] / result["rates"][low]["questions_per_s"]
    assert probe_generator is not None
    if probe_generator.capabilities.prompt_lists:  # what a client sending one prompt per request gets
        result["one_prompt_per_request"] = {}
        single = dataclasses.replace(probe_generator.capabilities, prompt_lists=False)
        for concurrency in sorted({min(section.concurrency), max(section.concurrency)}):
            generator = connect(
                max_concurrency=concurrency, capabilities=single, probe_record=probe_generator.probe_record
            )
            servable, _ = servable_features(features, generator.capabilities)
            _, seconds = _timed_collect(generator, rows, servable, ctx)
            result["one_prompt_per_request"][str(concurrency)] = {"questions_per_s": len(rows) / seconds}
            ctx.log.info("%s, one prompt per request, concurrency %d: %.2f q/s", name, concurrency, len(rows) / seconds)
            generator.close()
    return result


def serve_model_command(
    model: str,
    port: int,
    served_name: str,
    *,
    top_logprobs: int,
    batch_size: int,
    device: str,
    dtype: str,
    continuous: bool = False,
) -> list[str]:
    """The command line that starts ``workbench serve-model`` on ``model`` (a generator reference) with this
    interpreter, on ``127.0.0.1:port`` under ``served_name``, as a process of its own (run it with
    :func:`workbench.serve.load.server_process`); no generation cache, no embedder (the measurement is the
    generator's); ``continuous``: with continuous batching (``--continuous``, serve-model's default), else
    request-level batching (``--no-continuous``) — named either way, so the row means the same whatever the default."""
    return [
        sys.executable, "-m", "workbench", "serve-model", "--model", model, "--port", str(port),
        "--served-name", served_name, "--max-logprobs", str(top_logprobs), "--batch-size", str(batch_size),
        "--device", device, "--dtype", dtype, "--embedder", "none",
        "--continuous" if continuous else "--no-continuous",
    ]  # fmt: skip


def _serve_model_command(ctx: StageContext, port: int, served_name: str, continuous: bool) -> list[str]:
    generator = ctx.config.generator
    return serve_model_command(
        str(generator.model),
        port,
        served_name,
        top_logprobs=ctx.config.bench_served.top_logprobs,
        batch_size=generator.batch_size,
        device=generator.device,
        dtype=generator.dtype,
        continuous=continuous,
    )


def _llama_cpp_command(port: int, gguf: Path, threads: int) -> list[str]:
    return [
        sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
        "--port", str(port), "--n_ctx", "2048", "--logits_all", "true", "--n_threads", str(threads),
        "--model_alias", LLAMA_CPP_NAME,
    ]  # fmt: skip


LLAMA_SERVER_SLOT_CONTEXT = 2048
"""Context tokens per llama-server slot (llama-server splits ``--ctx-size`` evenly among its ``--parallel`` slots)."""


def llama_server_command(binary: str, port: int, gguf: Path, *, threads: int, slots: int) -> list[str]:
    """The command line that starts llama.cpp's own ``llama-server`` (``binary``) on ``gguf`` at ``127.0.0.1:port``
    with ``slots`` parallel slots (continuous batching, its default), :data:`LLAMA_SERVER_SLOT_CONTEXT` tokens of
    context each, ``threads`` threads for decoding and prompt processing, served as :data:`LLAMA_CPP_NAME`."""
    return [
        binary, "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
        "--ctx-size", str(LLAMA_SERVER_SLOT_CONTEXT * slots), "--parallel", str(slots), "--cont-batching",
        "--threads", str(threads), "--threads-batch", str(threads), "--alias", LLAMA_CPP_NAME,
    ]  # fmt: skip


def _engine_command(ctx: StageContext, engine: str, port: int, threads: int) -> tuple[list[str], str, str] | str:
    """The command that starts ``engine`` on ``port``, the model name it serves and the URL that answers 200 once it
    is ready; or why it is not run. (llama-server answers ``/v1/models`` while it still loads the model, and 503 to
    a completion then: its ``/health`` says when it is ready.)"""

    models = f"http://127.0.0.1:{port}/v1/models"
    if engine in ("serve_model", "serve_model_continuous"):
        return _serve_model_command(ctx, port, "bench", engine == "serve_model_continuous"), "bench", models
    gguf = _embedded_gguf(str(ctx.config.generator.model))
    if gguf is None:
        return f"{ctx.config.generator.model!r} has no embedded GGUF file to serve"
    if engine == "llama_cpp":
        if importlib.util.find_spec("llama_cpp") is None:
            return "llama-cpp-python is not installed (pip install 'workbench[llamacpp]')"
        return _llama_cpp_command(port, gguf, threads), LLAMA_CPP_NAME, models
    section = ctx.config.bench_served
    binary = shutil.which(section.llama_server)
    if binary is None:
        return f"no llama-server binary at {section.llama_server!r} (bench_served.llama_server; docs/served-models.md)"
    command = llama_server_command(binary, port, gguf, threads=threads, slots=section.llama_server_slots)
    return command, LLAMA_CPP_NAME, f"http://127.0.0.1:{port}/health"


def _embedded_gguf(ref: str) -> Path | None:
    """The GGUF file an embedded generator name is converted from (None for other references)."""

    if ref in EMBEDDED_ADAPTERS:  # an adapter over a base: llama.cpp would serve the base without it
        return None
    if ref not in EMBEDDED_GENERATORS:
        return None
    module, dist, filename = EMBEDDED_GENERATORS[ref]
    path = package_dir(module, dist) / filename
    return path if path.is_file() else None


def run(ctx: StageContext) -> dict[str, Any]:
    """Collect in-process, then through each engine; save ``bench.json``; return the headline ratios."""

    from workbench.data.dataset_store import load_saved_dataset_dict

    section, features = ctx.config.bench_served, list(ctx.config.bench_served.features)
    if ctx.config.generator.backend != "hf":
        raise ConfigError("bench_served compares a served copy with the in-process model: use backend hf", "generator")
    split = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")[section.split]
    rows = [dict(r) for r in split.select(range(min(section.questions, len(split))))]
    generator = build_generator(
        resolve_model(ctx.config.generator.model),
        device=ctx.config.generator.device,
        dtype=ctx.config.generator.dtype,
        batch_size=ctx.config.generator.batch_size,
        cache=False,
        seed=ctx.config.seed,
        device_key="generator.device",
        prompt_format=ctx.config.generator.prompt_format,
    )
    _collect(generator, rows[:2], features, ctx)  # warm
    exact, seconds = _timed_collect(generator, rows, features, ctx)
    in_process_rate = len(rows) / seconds
    options = [[str(o) for o in r.get("options") or []] for r in rows]
    labels = [
        score_answer(v["_greedy"], [str(a) for a in r["answers"]], o)["contains"]
        for v, r, o in zip(exact, rows, options, strict=True)
    ]
    ctx.log.info("in-process: %.2f questions/s", in_process_rate)
    result: dict[str, Any] = {
        "threads": (threads := thread_counts())["torch"],
        "thread_counts": threads,
        "generator": ctx.config.generator.model,
        "questions": len(rows),
        "features": features,
        "settings": {k: getattr(section, k) for k in ("split", "concurrency", "top_logprobs")},
        "in_process": {"questions_per_s": in_process_rate, "seconds": seconds, "batch_size": generator.batch_size},
        "accuracy": float(np.mean(labels)),
        "engines": {},
        "not_run": {},
    }
    del generator
    for engine in section.engines:
        port = free_port()
        base_url = f"http://127.0.0.1:{port}/v1"
        log_path = ctx.out_dir / f"{engine}.log"
        started = _engine_command(ctx, engine, port, threads["torch"])
        if isinstance(started, str):
            result["not_run"][engine] = started
            continue
        command, served_name, ready_url = started
        with server_process(command, ready_url, what=engine, log_path=log_path):
            result["engines"][engine] = _bench_engine(
                ctx, engine, base_url, served_name, rows, exact, labels, in_process_rate
            )
    atomic_write_json(ctx.out_dir / "bench.json", result)
    summary: dict[str, Any] = {"in_process_questions_per_s": round(in_process_rate, 3)}
    for engine, row in result["engines"].items():
        summary[f"{engine}_vs_in_process"] = round(row["vs_in_process"], 3)
        summary[f"{engine}_vs_own_lowest"] = round(row["vs_own_lowest"], 3)
    return summary


def report(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` and ``throughput.png`` to the report directory
    (:func:`workbench.bench.served.report.write_served_report`)."""
    return write_bench_report(
        ctx, "bench_served", lambda bench, tmp: write_served_report(bench, tmp, name=ctx.config.name, rerun=ctx.rerun)
    )[0]
