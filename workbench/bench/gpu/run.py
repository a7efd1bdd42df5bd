"""Stages ``bench_gpu`` and ``report_bench_gpu``: throughput and peak memory on a CUDA GPU, per model shape.

For each shape of ``bench_gpu.models`` (:data:`MODEL_SHAPES`: SmolLM2-135M's and Llama-3.2-1B's) a Llama is built
from its config with **random weights** and the tokenizer of ``generator.model`` (the embedded SmolLM2's by
default, resolved like every generator reference: :func:`workbench.backends.lora.resolve_model`), saved with
``save_pretrained`` into a temporary directory and loaded from there by the package's own generator
(:func:`workbench.backends.factory.build_generator`) on ``bench_gpu.device`` in ``bench_gpu.dtype``. Random weights
answer nothing: these are timings and memory, not quality. Then, by :func:`measure_model` and :func:`measure_serve`:

* **(a) collection** — questions/s collecting ``bench_gpu.features`` (the 18 of D²-RAG) in process at each generator
  batch size of ``batch_sizes``, by the stats graph exactly as ``bench_features`` times its *workbench* way
  (:func:`workbench.bench.features.run.collect_stats`, timed by its
  :func:`~workbench.bench.features.run.measure_ways`: one warm-up, then ``repeats`` runs, the median);
* **(b) serve-model** — the same collection through ``workbench serve-model`` on the same model directory, started
  as a process of its own as ``bench_served`` starts it, at each concurrency of ``concurrency`` (requests in flight,
  ``serve_prompts_per_request`` prompts each); the features the OpenAI protocol cannot give (hidden states,
  attention) are left out and listed;
* **(c) contrastive decoding vs greedy** — :func:`workbench.bench.decoding.run.benchmark_contrastive` on D²-RAG's
  relevant-mode pairs (:func:`workbench.bench.decoding.run.build_pairs`) at each B of ``decode_batch_sizes``,
  EOS off so every variant decodes ``max_new_tokens`` steps;
* **(d) peak memory** — ``torch.cuda.max_memory_allocated`` after each measurement of (a) and (c), its counter reset
  before it (warm-up included); for (b) the server is another process, so the GPU memory in use on the device
  (``cudaMemGetInfo``) after each concurrency less what was in use before the server started.

Each measurement runs over ``questions`` questions, or more when its batch size (concurrency x prompts per request,
pairs) is larger, so that every batch is full. Without CUDA the stage measures nothing: it logs one line and writes a
``bench.json`` saying it skipped and why, with the machine it ran on (``device: cpu`` measures on the CPU — for the
unit tests only). Output: ``bench.json``, the ``serve-model`` log per model; ``report_bench_gpu`` writes
``report.md`` and its plots (:mod:`workbench.bench.gpu.report`). Figures are reference figures only from a real GPU run
that names its card.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

from workbench.assets import no_training_imports
from workbench.backends.cost import CostCounter
from workbench.backends.device import resolve_device
from workbench.backends.factory import build_generator, build_served_generator
from workbench.backends.lora import resolve_model
from workbench.bench.decoding.run import benchmark_section, build_pairs
from workbench.bench.features.run import collect_stats, measure_ways, uncached_scorers
from workbench.bench.gpu.report import write_gpu_report
from workbench.bench.gpu.settings import MODEL_SHAPES, ModelShape, validate_section
from workbench.bench.harness import thread_counts
from workbench.bench.report import write_bench_report
from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError
from workbench.stages.context import StageContext
from workbench.uncertainty.calculators import StatSettings

MAX_POSITIONS = 8192
"""The context window every built model declares (SmolLM2's)."""

NO_CUDA = "no CUDA device (torch.cuda.is_available() is False)"
"""Why the stage skips on a machine without CUDA (logged once and written to ``bench.json``)."""

PARTIAL = "bench.partial.json"
"""What the stage has measured so far (``bench.json``'s form plus ``partial: true``), rewritten after each
measurement and removed once ``bench.json`` is written: a run cut short (a GPU lease ending) keeps its figures, and
:func:`workbench.bench.gpu.report.write_gpu_report` renders them."""


def questions_needed(section: Any) -> int:
    """How many questions the largest measurement of ``section`` reads (see the module docstring)."""
    return max(
        section.questions,
        *section.batch_sizes,
        *(c * section.serve_prompts_per_request for c in section.concurrency),
        *section.decode_batch_sizes,
    )


def machine_description() -> dict[str, Any]:
    """The machine this process runs on: OS, architecture, Python, CPU count, torch and the CUDA it was built with
    (None for a CPU build), and whether torch sees a CUDA device."""
    import torch

    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": bool(torch.cuda.is_available()),
    }


def device_description(device: str) -> dict[str, Any]:
    """What ``device`` is: for a CUDA device its card name (``torch.cuda.get_device_name``), memory, compute
    capability and the torch / CUDA / cuDNN versions; for ``cpu`` the processor and torch's version."""
    import torch

    out: dict[str, Any] = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda}
    if not device.startswith("cuda"):
        return {**out, "name": platform.processor() or platform.machine(), "kind": "cpu"}
    index = torch.device(device).index or 0
    props = torch.cuda.get_device_properties(index)
    return {
        **out,
        "kind": "cuda",
        "index": index,
        "name": torch.cuda.get_device_name(index),
        "memory_gib": props.total_memory / 2**30,
        "capability": f"{props.major}.{props.minor}",
        "cudnn": torch.backends.cudnn.version(),
    }


def build_random_model(
    shape: ModelShape, tokenizer_dir: str | Path, out_dir: Path, *, seed: int = 0, dtype: str = "bfloat16"
) -> dict[str, Any]:
    """Save a ``LlamaForCausalLM`` of ``shape`` with random weights (transformers' initialisation, seeded by ``seed``
    without touching the global RNG) in ``dtype``, plus the tokenizer found at ``tokenizer_dir``, into ``out_dir``
    (``save_pretrained``: a plain local model directory any generator reference may name).

    The vocabulary is the larger of the shape's and the tokenizer's; special-token ids are the tokenizer's; embeddings
    are tied (as in both named shapes); the window is :data:`MAX_POSITIONS`. Returns the shape's numbers with the
    vocabulary and ``parameters`` (unique parameters, tied embeddings counted once)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    vocab = max(shape.vocab or 0, len(tokenizer))
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.to(getattr(torch, dtype))
    parameters = sum(p.numel() for p in model.parameters())  # .parameters() yields a tied tensor once
    out_dir.mkdir(parents=True, exist_ok=True)
    with no_training_imports():
        model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return {**dataclasses.asdict(shape), "vocab": vocab, "parameters": parameters}


def _is_cuda(device: str) -> bool:
    return device.startswith("cuda")


def _reset_peak(device: str) -> None:
    """Reset ``torch.cuda.max_memory_allocated``'s counter of ``device`` (nothing on a CPU)."""
    if _is_cuda(device):
        import torch

        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def _peak_mb(device: str) -> float | None:
    """MiB ``torch.cuda.max_memory_allocated`` reports for ``device`` since the last reset (None on a CPU)."""
    if not _is_cuda(device):
        return None
    import torch

    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) / 2**20


def _allocated_mb(device: str) -> float | None:
    """MiB this process holds in tensors on ``device`` now (None on a CPU)."""
    if not _is_cuda(device):
        return None
    import torch

    return torch.cuda.memory_allocated(device) / 2**20


def _in_use_mb(device: str) -> float | None:
    """MiB in use on ``device`` by every process (``cudaMemGetInfo``: total - free; None on a CPU)."""
    if not _is_cuda(device):
        return None
    import torch

    free, total = torch.cuda.mem_get_info(device)
    return (total - free) / 2**20


def _release(device: str) -> None:
    """Give the caching allocator's free blocks back to the device, so the next model starts clean."""

    gc.collect()
    if _is_cuda(device):
        import torch

        torch.cuda.empty_cache()


def _stat_settings(section: Any) -> Any:
    return StatSettings(
        samples=section.samples,
        temperature=section.temperature,
        max_new_tokens=section.max_new_tokens,
        paraphrases=section.paraphrases,
    )


def measure_model(
    model_dir: str | Path,
    section: Any,
    *,
    device: str,
    dtype: str,
    rows: list[dict],
    experts: list[str],
    amateurs: list[str],
    judge: Any,
    embedder: Any,
    counter: Any,
    seed: int = 0,
    log: Any = None,
    progress: Any = None,
) -> dict[str, Any]:
    """Measure (a) collection and (c) contrastive decoding, with (d) their peak memory, for the model at
    ``model_dir`` loaded on ``device`` in ``dtype`` by the package's generator (no generation cache; its costs go to
    ``counter``, the counter ``judge`` and ``embedder`` count into too).

    ``section`` is a ``bench_gpu`` section (:class:`~workbench.bench.gpu.settings.BenchGpuSection`): its
    ``features``, stat settings, ``batch_sizes``, ``decode_batch_sizes``, ``alpha``, ``max_new_tokens``, ``questions``
    and ``repeats`` are used. ``rows`` (dicts with a ``question``) must hold at least ``max(questions, largest batch
    size)`` rows, ``experts`` / ``amateurs`` at least the largest decoding batch size. ``device`` is any torch device:
    the stage passes ``bench_gpu.device``, a unit test ``cpu`` (peak memory is then None).

    Returns ``{"device", "dtype", "parameters", "weights_mb", "collection": [...], "decoding": [...]}``: one
    ``collection`` entry per batch size (``batch_size``, ``questions``, ``questions_per_s`` and
    :func:`~workbench.bench.features.run.measure_ways`'s median costs with their spread, ``peak_memory_mb``), one
    ``decoding`` entry per B (:func:`~workbench.bench.decoding.run.benchmark_contrastive`'s result plus
    ``peak_memory_mb``). ``progress``, when given, is called with that dict after each measurement (the stage keeps
    a partial ``bench.json`` with it). Raises ``ValueError`` when ``rows`` or the pairs are too few.
    """

    features = list(section.features)
    sizes = [int(b) for b in section.batch_sizes]
    pairs = [int(b) for b in section.decode_batch_sizes]
    if len(rows) < max(section.questions, *sizes):
        raise ValueError(f"{len(rows)} rows, the largest measurement needs {max(section.questions, *sizes)}")
    if pairs and min(len(experts), len(amateurs)) < max(pairs):
        raise ValueError(f"{min(len(experts), len(amateurs))} pairs, the largest decoding batch needs {max(pairs)}")
    settings = _stat_settings(section)
    _reset_peak(device)
    generator = build_generator(
        str(model_dir),
        device=device,
        dtype=dtype,
        batch_size=max(sizes),
        cache=False,
        counter=counter,
        seed=seed,
        device_key="bench_gpu.device",
    )
    out: dict[str, Any] = {
        "device": device,
        "dtype": dtype,
        "parameters": sum(p.numel() for p in generator.model.parameters()),
        "weights_mb": _allocated_mb(device),
        "collection": [],
        "decoding": [],
    }
    try:
        for size in sizes:
            batch = rows[: max(section.questions, size)]
            generator.batch_size = size
            if log is not None:
                log.info("bench_gpu: collection, batch size %d, %d question(s)", size, len(batch))

            def collect(batch: list[dict] = batch) -> None:
                collect_stats(batch, features, generator=generator, judge=judge, embedder=embedder, settings=settings)

            _reset_peak(device)
            way = measure_ways(counter, {"collect": collect}, section.repeats)["collect"]
            out["collection"].append(
                {
                    "batch_size": size,
                    "questions": len(batch),
                    "questions_per_s": len(batch) / way["seconds"] if way["seconds"] > 0 else None,
                    **way,
                    "peak_memory_mb": _peak_mb(device),
                }
            )
            if progress is not None:
                progress(out)
        for size in pairs:
            generator.batch_size = size  # one chunk: every variant decodes the B pairs in one batch
            if log is not None:
                log.info("bench_gpu: contrastive decoding vs greedy, %d pair(s)", size)
            _reset_peak(device)
            result = benchmark_section(generator, experts[:size], amateurs[:size], section, ignore_eos=True)
            out["decoding"].append({**result, "peak_memory_mb": _peak_mb(device)})
            if progress is not None:
                progress(out)
    finally:
        generator = None  # the closures above read it through this name: now the model can be freed
        _release(device)
    return out


def measure_serve(
    model_dir: str | Path,
    section: Any,
    *,
    device: str,
    dtype: str,
    rows: list[dict],
    judge: Any,
    embedder: Any,
    counter: Any,
    seed: int = 0,
    log_path: Path | None = None,
    log: Any = None,
    progress: Any = None,
) -> dict[str, Any]:
    """Measure (b): the collection of :func:`measure_model` through ``workbench serve-model`` serving ``model_dir``
    on ``device`` in ``dtype``, started as a process of its own (:func:`workbench.bench.served.run.
    serve_model_command` in :func:`workbench.serve.load.server_process`; its output to ``log_path``), reached by the
    served generator at each concurrency of ``section.concurrency`` with ``serve_prompts_per_request`` prompts per
    request. Call it with no model of this process on the device (the server holds its own copy).

    Returns ``{"server_batch_size", "features", "skipped", "levels": [...]}``: the features collected (those the
    protocol can give, in order) and the others with the capabilities they lack; per concurrency ``concurrency``,
    ``questions``, ``questions_per_s``, the median costs with their spread, and ``server_memory_mb`` — GPU memory in
    use on the device after the measurement less before the server started (None on a CPU). ``rows`` must hold at
    least ``max(questions, largest concurrency x prompts per request)`` rows (else ``ValueError``). ``progress``, when
    given, is called with that dict after each concurrency.
    """
    from workbench.bench.served.run import servable_features, serve_model_command
    from workbench.serve.load import free_port, server_process

    per_request = section.serve_prompts_per_request
    levels = [int(c) for c in section.concurrency]
    needed = max(section.questions, *(c * per_request for c in levels))
    if len(rows) < needed:
        raise ValueError(f"{len(rows)} rows, the largest served measurement needs {needed}")
    server_batch = max(levels) * per_request  # the server may answer every request in flight by one forward batch
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    command = serve_model_command(
        str(model_dir),
        port,
        "bench",
        top_logprobs=section.top_logprobs,
        batch_size=server_batch,
        device=device,
        dtype=dtype,
    )
    settings = _stat_settings(section)
    before = _in_use_mb(device)
    out: dict[str, Any] = {"server_batch_size": server_batch, "features": [], "skipped": {}, "levels": []}
    probe: Any = None
    with server_process(command, f"{base_url}/models", what="serve-model", log_path=log_path):
        for concurrency in levels:
            generator = build_served_generator(
                base_url=base_url,
                model="bench",
                tokenizer=str(model_dir),
                max_concurrency=concurrency,
                top_logprobs=section.top_logprobs,
                batch_size=per_request,
                cache=False,
                counter=counter,
                seed=seed,
                capabilities=getattr(probe, "capabilities", None),
                probe_record=getattr(probe, "probe_record", None),
            )
            probe = probe or generator
            servable, skipped = servable_features(list(section.features), generator.capabilities)
            batch = rows[: max(section.questions, concurrency * per_request)]
            if log is not None:
                log.info("bench_gpu: serve-model, concurrency %d, %d question(s)", concurrency, len(batch))

            def collect(batch: list[dict] = batch, generator: Any = generator, servable: list[str] = servable) -> None:
                collect_stats(batch, servable, generator=generator, judge=judge, embedder=embedder, settings=settings)

            try:
                way = measure_ways(counter, {"serve": collect}, section.repeats)["serve"]
            finally:
                generator.close()
            in_use = _in_use_mb(device)
            out["features"], out["skipped"] = servable, skipped
            out["levels"].append(
                {
                    "concurrency": concurrency,
                    "questions": len(batch),
                    "questions_per_s": len(batch) / way["seconds"] if way["seconds"] > 0 else None,
                    **way,
                    "server_memory_mb": None if in_use is None or before is None else in_use - before,
                }
            )
            if progress is not None:
                progress(out)
    return out


def _skip(ctx: StageContext, section: Any, reason: str) -> dict[str, Any]:
    """Log one line, write the skipped ``bench.json`` (why, on what machine, the settings) and return the summary."""
    ctx.log.info("bench_gpu: skipped — %s", reason)
    bench = {
        "skipped": True,
        "reason": reason,
        "machine": machine_description(),
        "settings": dataclasses.asdict(section),
    }
    atomic_write_json(ctx.out_dir / "bench.json", bench)
    return {"skipped": True}


def run(ctx: StageContext) -> dict[str, Any]:
    """Measure every shape of ``bench_gpu.models`` (see the module docstring); write ``bench.json``.

    On a machine without CUDA (``bench_gpu.device`` cuda / cuda:N) it skips: one log line, a ``bench.json`` with
    ``skipped: true``, the reason and the machine. Raises :class:`ConfigError` (``bench_gpu.<key>``) for a setting
    :func:`validate_section` refuses, a GPU index this machine lacks, an unknown split or one with fewer questions
    than the largest measurement needs (:func:`questions_needed`). Returns a flat summary: per model the best
    collection rate, the largest concurrency's served rate and the largest B's contrastive / greedy time ratio.
    """

    import datasets
    import torch

    from workbench.data.dataset_store import load_saved_dataset_dict

    section = ctx.config.bench_gpu
    validate_section(section)
    if _is_cuda(section.device) and not torch.cuda.is_available():
        return _skip(ctx, section, NO_CUDA)
    device = resolve_device(section.device, "bench_gpu.device")
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    if section.split not in qa:
        raise ConfigError(f"split '{section.split}' not in the dataset (has: {', '.join(qa)})", "bench_gpu.split")
    split, needed = qa[section.split], questions_needed(section)
    if len(split) < needed:
        raise ConfigError(
            f"the largest measurement needs {needed} questions, split '{section.split}' has {len(split)}",
            "bench_gpu.questions",
        )
    rows = [dict(r) for r in split.select(range(needed))]
    experts: list[str] = []
    amateurs: list[str] = []
    no_context = 0
    if section.decode_batch_sizes:
        corpus = datasets.load_from_disk(str(ctx.inputs["build_data"] / "corpus"))
        questions = [str(r["question"]) for r in rows[: max(section.decode_batch_sizes)]]
        experts, amateurs, no_context = build_pairs(ctx, questions, corpus, section=section)
    counter = CostCounter()
    embedder, judge = uncached_scorers(ctx, counter, device=device)
    tokenizer_dir = resolve_model(ctx.config.generator.model).path
    bench: dict[str, Any] = {
        "skipped": False,
        "device": device_description(device),
        "machine": machine_description(),
        "dtype": section.dtype,
        "threads": (threads := thread_counts())["torch"],
        "thread_counts": threads,
        "tokenizer": ctx.config.generator.model,
        "embedder": ctx.config.embedder.model,
        "nli_judge": ctx.config.nli.kind,
        "retriever": ctx.config.retrieval.backend,
        "settings": dataclasses.asdict(section),
        "no_context": no_context,
        "models": [],
    }
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        for name in section.models:
            model_dir = Path(tmp) / name
            ctx.log.info("bench_gpu: building %s (random weights, %s)", name, section.dtype)
            shape = build_random_model(
                MODEL_SHAPES[name], tokenizer_dir, model_dir, seed=ctx.config.seed, dtype=section.dtype
            )
            common = {"device": device, "dtype": section.dtype, "rows": rows, "judge": judge, "embedder": embedder}

            def checkpoint(partial: dict[str, Any], name: str = name, shape: dict[str, Any] = shape) -> None:
                # a GPU lease or a job can end mid-run: what was measured so far stays readable
                models = [*bench["models"], {"name": name, "shape": shape, **partial}]
                atomic_write_json(ctx.out_dir / PARTIAL, {**bench, "partial": True, "models": models})

            result = measure_model(
                model_dir,
                section,
                experts=experts,
                amateurs=amateurs,
                counter=counter,
                seed=ctx.config.seed,
                log=ctx.log,
                progress=checkpoint,
                **common,
            )
            if section.concurrency:
                result["serve"] = measure_serve(
                    model_dir,
                    section,
                    counter=counter,
                    seed=ctx.config.seed,
                    log_path=ctx.out_dir / f"serve-model-{name}.log",
                    log=ctx.log,
                    progress=lambda serve, result=result, checkpoint=checkpoint: checkpoint({**result, "serve": serve}),
                    **common,
                )
            bench["models"].append({"name": name, "shape": shape, **result})
            _release(device)
    atomic_write_json(ctx.out_dir / "bench.json", bench)
    (ctx.out_dir / PARTIAL).unlink(missing_ok=True)
    return summary(bench)


def summary(bench: dict[str, Any]) -> dict[str, Any]:
    """The flat summary of a ``bench.json``: ``skipped``, and per model ``<name>_collect_questions_per_s`` (the best
    batch size's rate), ``<name>_served_questions_per_s`` (the largest concurrency's), ``<name>_contrastive_ratio``
    (batched contrastive / greedy time at the largest B) and ``<name>_peak_memory_mb`` (the largest peak)."""
    out: dict[str, Any] = {"skipped": bool(bench.get("skipped"))}
    for model in bench.get("models", []):
        name = model["name"]
        rates = [c["questions_per_s"] for c in model["collection"] if c["questions_per_s"]]
        out[f"{name}_collect_questions_per_s"] = _round(max(rates)) if rates else None
        if model.get("serve"):
            out[f"{name}_served_questions_per_s"] = _round(model["serve"]["levels"][-1]["questions_per_s"])
        if model["decoding"]:
            out[f"{name}_contrastive_ratio"] = _round(model["decoding"][-1]["ratio_batched_vs_greedy"])
        peaks = [e["peak_memory_mb"] for e in model["collection"] + model["decoding"] if e["peak_memory_mb"]]
        out[f"{name}_peak_memory_mb"] = _round(max(peaks), 1) if peaks else None
    return out


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), digits)


def report(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` (and, when the stage measured, its plots) to the report directory
    (:func:`workbench.bench.gpu.report.write_gpu_report`); a skipped run gets a short report saying so and where."""
    summary, bench = write_bench_report(
        ctx, "bench_gpu", lambda bench, tmp: write_gpu_report(bench, tmp, name=ctx.config.name, rerun=ctx.rerun)
    )
    return {**summary, "skipped": bool(bench.get("skipped"))}
