"""Stages ``bench_decoding`` and ``report_bench_decoding``: what contrastive decoding costs over plain greedy.

D²-RAG's relevant mode decodes each answer contrastively from two prompts of the same question: the **expert**
(the answering prompt with the top-``k`` retrieved passages) and the **amateur** (the closed-book prompt), the same
prompts D²-RAG builds (:func:`~workbench.methods.common.prompt_for` around
:func:`~workbench.methods.common.context_block`). For each batch size B in ``bench_decoding.batch_sizes`` the first
B (expert, amateur) pairs of ``bench_decoding.split`` are decoded four ways by
:func:`benchmark_contrastive`:

* **greedy** — plain greedy decoding of the B expert prompts (the floor: one forward of B rows per step);
* **batched** — contrastive decoding with both streams stacked in one forward of 2B rows per step;
* **sequential** — the same decisions with two forwards of B rows per step (one decoder per stream);
* **padded** — the batched engine with both streams prefilled by ONE forward of 2B rows padded to the longest
  prompt, instead of one forward per stream at its own width (what the split prefill saves).

Stop strings are disabled and, with ``bench_decoding.ignore_eos`` (the default), so is EOS: every variant decodes
exactly ``max_new_tokens`` steps, the same work. Each time is the median of ``repeats`` runs after one warm-up (the
rounds in rotated order; the report gives the min–max next to each median), with no generation cache. Target: batched /
greedy time at most ``target_ratio``. Batch sizes above ``generator.batch_size`` are decoded in chunks of that many
pairs (every variant alike), so the generator's batch size should be at least the largest B.

Output of ``bench_decoding``: ``bench.json`` — the settings, the torch thread count, the device, the model and one
:func:`benchmark_contrastive` result per batch size (``results``, in ``batch_sizes`` order). ``report_bench_decoding``
writes ``report.md`` and ``seconds.png`` into ``report.dir`` (the writer: :mod:`workbench.bench.decoding.report`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from workbench.backends.cost import CostCounter
from workbench.bench.decoding.report import write_decoding_report
from workbench.bench.decoding.settings import validate_section
from workbench.bench.harness import measure, thread_counts
from workbench.bench.report import write_bench_report
from workbench.core.atomic import atomic_write_json
from workbench.core.errors import ConfigError
from workbench.decoding.contrastive import ContrastiveGeneration, contrastive_generate, sequential_contrastive_generate
from workbench.methods.base import Tools
from workbench.methods.common import context_block, prompt_for
from workbench.stages.context import StageContext


def build_pairs(
    ctx: StageContext, questions: list[str], corpus: Any, *, section: Any = None
) -> tuple[list[str], list[str], int]:
    """D²-RAG's relevant-mode prompts for ``questions``: expert = with the top-k context, amateur = closed-book,
    rendered by the run's generator and retrieved by the run's retriever over ``corpus``.

    ``section`` gives ``k``, ``passage_chars`` and ``max_new_tokens`` (default: the recipe's ``bench_decoding``
    section; ``bench_gpu`` passes its own). Returns ``(experts, amateurs, no_context)``; ``no_context`` counts the
    questions retrieval found nothing for (their expert prompt is the closed-book one).
    """

    section = section if section is not None else ctx.config.bench_decoding
    tools = Tools(
        generator=ctx.resources.generator(),
        retriever=ctx.resources.retriever(corpus),
        corpus=corpus,
        counter=ctx.counter,
        passage_chars=section.passage_chars,
        max_new_tokens=section.max_new_tokens,
    )
    passages = tools.search(questions, section.k)
    experts, amateurs, no_context = [], [], 0
    for question, found in zip(questions, passages, strict=True):
        context = context_block(found, tools.passage_chars)
        no_context += context is None
        experts.append(prompt_for(tools, question, context, section.max_new_tokens).text)
        amateurs.append(prompt_for(tools, question, None, section.max_new_tokens).text)
    return experts, amateurs, no_context


def run(ctx: StageContext) -> dict[str, Any]:
    """Benchmark greedy vs batched vs sequential contrastive decoding per batch size; write ``bench.json``.

    Uses the first ``max(batch_sizes)`` questions of ``bench_decoding.split`` (build_data's ``qa``) and the run's
    retriever over build_data's ``corpus``. Raises :class:`ConfigError` (``bench_decoding.<key>``) for an empty
    ``batch_sizes``, a size < 1, ``repeats`` / ``max_new_tokens`` / ``k`` < 1, a negative α, ``target_ratio`` ≤ 0,
    an unknown split or one with fewer questions than the largest batch size. Returns a flat summary (largest B).
    """
    import datasets

    from workbench.data.dataset_store import load_saved_dataset_dict

    section = ctx.config.bench_decoding
    validate_section(section)
    sizes = [int(b) for b in section.batch_sizes]
    largest = max(sizes)
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    if section.split not in qa:
        raise ConfigError(f"split '{section.split}' not in the dataset (has: {', '.join(qa)})", "bench_decoding.split")
    split = qa[section.split]
    if len(split) < largest:
        raise ConfigError(
            f"the largest batch size {largest} needs {largest} questions, split '{section.split}' has {len(split)}",
            "bench_decoding.batch_sizes",
        )
    questions = [str(q) for q in split.select(range(largest))["question"]]
    corpus = datasets.load_from_disk(str(ctx.inputs["build_data"] / "corpus"))
    experts, amateurs, no_context = build_pairs(ctx, questions, corpus)
    generator = ctx.resources.generator()
    if largest > generator.batch_size:
        ctx.log.warning(
            "batch size %d > generator.batch_size %d: pairs are decoded in chunks of %d",
            largest,
            generator.batch_size,
            generator.batch_size,
        )
    results = []
    for size in sizes:
        ctx.log.info("bench_decoding: %d pair(s), %d repeat(s)", size, section.repeats)
        result = benchmark_section(
            generator,
            experts[:size],
            amateurs[:size],
            section,
            target_ratio=section.target_ratio,
            ignore_eos=section.ignore_eos,
            min_seconds=section.min_seconds,
        )
        results.append(result)
    bench = {
        "generator": ctx.config.generator.model,
        "device": str(next(generator.model.parameters()).device),
        "dtype": generator.dtype,
        "generator_batch_size": generator.batch_size,
        "threads": (threads := thread_counts())["torch"],
        "thread_counts": threads,
        "settings": {
            "split": section.split,
            "batch_sizes": sizes,
            "max_new_tokens": section.max_new_tokens,
            "repeats": section.repeats,
            "min_seconds": section.min_seconds,
            "alpha": section.alpha,
            "k": section.k,
            "passage_chars": section.passage_chars,
            "retriever": ctx.config.retrieval.backend,
            "target_ratio": section.target_ratio,
            "ignore_eos": section.ignore_eos,
        },
        "no_context": no_context,
        "results": results,
    }
    atomic_write_json(ctx.out_dir / "bench.json", bench)
    top = results[sizes.index(largest)]
    return {
        "pairs": largest,
        "ratio_batched_vs_greedy": _round(top["ratio_batched_vs_greedy"]),
        "ratio_sequential_vs_greedy": _round(top["ratio_sequential_vs_greedy"]),
        "speedup_batched_vs_sequential": _round(top["speedup_batched_vs_sequential"]),
        "ratio_per_forward_batched_vs_greedy": _round(top["ratio_per_forward_batched_vs_greedy"]),
        "parity": all(r["parity"] for r in results),
        "meets_target": bool(top["meets_target"]),
        "threads": bench["threads"],
    }


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), digits)


def report(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` and ``seconds.png`` (seconds per variant per batch size) to the report directory
    (:func:`workbench.bench.decoding.report.write_decoding_report`)."""
    return write_bench_report(
        ctx, "bench_decoding", lambda bench, tmp: write_decoding_report(bench, tmp, name=ctx.config.name)
    )[0]


def benchmark_section(
    generator: Any, prompts_expert: Sequence[str], prompts_amateur: Sequence[str], section: Any, **options: Any
) -> dict[str, Any]:
    """:func:`benchmark_contrastive` with a benchmark section's (``bench_decoding``, ``bench_gpu``)
    ``max_new_tokens``, ``repeats`` and ``alpha``, and no stop strings; ``options`` are its other keywords."""
    return benchmark_contrastive(
        generator,
        prompts_expert,
        prompts_amateur,
        max_new_tokens=section.max_new_tokens,
        repeats=section.repeats,
        alpha=section.alpha,
        stop=(),
        **options,
    )


def benchmark_contrastive(
    generator: Any,
    prompts_expert: Sequence[str],
    prompts_amateur: Sequence[str],
    *,
    max_new_tokens: int,
    repeats: int = 3,
    alpha: float = 1.0,
    stop: Sequence[str] | None = (),
    target_ratio: float = 1.3,
    ignore_eos: bool = False,
    min_seconds: float = 0.0,
) -> dict[str, Any]:
    """Median wall time of plain greedy on the expert prompts vs batched vs sequential contrastive decoding, and of
    the batched engine with both streams prefilled by one padded forward (``padded``: what the split prefill saves).

    Each variant runs once to warm up (its outputs, costs and model forward passes recorded, under a forward hook
    removed before any timing), then the harness (:func:`workbench.bench.harness.measure`) times ``repeats`` rounds,
    round r starting with variant r mod 4 (rotated order: none is always first or always right after another), and more
    rounds while the timed rounds took less than ``min_seconds`` in all (at most ``10 × repeats``: a short measurement,
    noisier on a shared machine, gets more runs; ``repeats`` in the result is the rounds run); ``times_s`` holds every
    timed run, the medians and ``spread_s`` (min, max) come from them. ``ignore_eos`` lets no token end an answer (the
    generator's ``eos_ids`` emptied for the run), so with ``stop=()`` every variant decodes exactly ``max_new_tokens``
    tokens: the same work, whatever the contrast does to where an answer would end. The generation cache is bypassed and
    the generator's counter is left untouched (all three restored afterwards); the costs and the number of model forward
    passes of one run of each variant are reported. Steps differ between variants when they stop at different places
    (EOS, ``stop``: contrast changes the tokens), so per-step times (greedy steps = answer tokens + 1 for a terminator)
    and per-forward times are given too; ``ratio_per_forward_batched_vs_greedy`` is the cost of one batched forward of
    2B rows relative to one of B rows. ``ratio_batched_vs_greedy`` is the headline number (target ≤ ``target_ratio``);
    ``parity`` says whether batched, sequential and padded chose the same tokens.
    """

    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    experts, amateurs = list(prompts_expert), list(prompts_amateur)
    saved_cache, saved_counter, saved_eos = generator.cache, generator.counter, generator.eos_ids
    generator.cache = None
    if ignore_eos:
        generator.eos_ids = frozenset()

    def padded() -> list[ContrastiveGeneration]:  # the batched engine with both streams prefilled in one forward
        saved = generator.joinable_cache
        generator.joinable_cache = False
        try:
            return contrastive_generate(generator, experts, amateurs, alpha, max_new_tokens=max_new_tokens, stop=stop)
        finally:
            generator.joinable_cache = saved

    variants = {
        "greedy": lambda: generator.generate(experts, max_new_tokens=max_new_tokens, temperature=0.0, stop=stop),
        "batched": lambda: contrastive_generate(
            generator, experts, amateurs, alpha, max_new_tokens=max_new_tokens, stop=stop
        ),
        "sequential": lambda: sequential_contrastive_generate(
            generator, experts, amateurs, alpha, max_new_tokens=max_new_tokens, stop=stop
        ),
        "padded": padded,
    }
    outputs: dict[str, Any] = {}
    costs: dict[str, Any] = {}
    forwards: dict[str, int] = {}
    calls: list[int] = []
    hook = generator.model.register_forward_hook(lambda module, args, output: calls.append(1))
    try:
        for name, run in variants.items():  # warm-up run: outputs, costs and model forward passes
            generator.counter = CostCounter()
            calls.clear()
            outputs[name] = run()
            forwards[name] = len(calls)
            costs[name] = {k: v for k, v in generator.counter.as_dict().items() if k != "seconds"}
        hook.remove()

        def fresh_counter(run: Callable[[], Any]) -> Callable[[], Any]:
            def way() -> Any:
                generator.counter = CostCounter()  # each run's costs apart; read from the warm-up above
                return run()

            return way

        timed = {name: fresh_counter(run) for name, run in variants.items()}
        measured = measure(timed, repeats, warm=False, min_seconds=min_seconds)
    finally:
        hook.remove()
        generator.cache, generator.counter, generator.eos_ids = saved_cache, saved_counter, saved_eos
    rounds = measured.rounds
    times = {name: measured.seconds(name) for name in variants}
    median = {name: measured.median(name) for name in variants}
    steps = {
        "greedy": sum(len(g.token_ids) + (g.finish_reason != "length") for g in outputs["greedy"]),
        **{name: sum(g.steps for g in outputs[name]) for name in ("batched", "sequential", "padded")},
    }
    ratio = median["batched"] / median["greedy"] if median["greedy"] > 0 else float("nan")
    per_forward = {k: (median[k] / forwards[k] if forwards[k] else None) for k in median}
    return {
        "pairs": len(experts),
        "max_new_tokens": max_new_tokens,
        "repeats": rounds,
        "alpha": alpha,
        "greedy_s": median["greedy"],
        "batched_s": median["batched"],
        "sequential_s": median["sequential"],
        "padded_s": median["padded"],
        "times_s": times,
        "spread_s": {name: (min(values), max(values)) for name, values in times.items()},
        "ignore_eos": ignore_eos,
        "ratio_batched_vs_greedy": ratio,
        "ratio_sequential_vs_greedy": measured.ratio("sequential", "greedy"),
        "speedup_batched_vs_sequential": measured.ratio("sequential", "batched"),
        "ratio_padded_vs_greedy": measured.ratio("padded", "greedy"),
        "speedup_split_vs_padded_prefill": measured.ratio("padded", "batched"),
        "steps": steps,
        "seconds_per_step": {k: (median[k] / steps[k] if steps[k] else None) for k in median},
        "forwards": forwards,
        "seconds_per_forward": per_forward,
        "ratio_per_forward_batched_vs_greedy": (
            per_forward["batched"] / per_forward["greedy"] if per_forward["batched"] and per_forward["greedy"] else None
        ),
        "costs": costs,
        "parity": all(
            np.array_equal(b.token_ids, s.token_ids) and np.array_equal(b.token_ids, p.token_ids)
            for b, s, p in zip(outputs["batched"], outputs["sequential"], outputs["padded"], strict=True)
        ),
        "target_ratio": target_ratio,
        "meets_target": bool(ratio <= target_ratio),
    }
