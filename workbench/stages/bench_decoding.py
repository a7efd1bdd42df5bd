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
writes ``report.md`` and ``seconds.png`` into ``report.dir``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workbench.core.atomic import atomic_directory, atomic_write_json
from workbench.core.errors import ConfigError
from workbench.core.formatting import fmt
from workbench.stages.context import StageContext

VARIANTS = ("greedy", "batched", "sequential")  # the main table's forwards column
PLOTTED = (*VARIANTS, "padded")


def validate_section(section: Any) -> None:
    """Raise a one-line :class:`ConfigError` naming ``bench_decoding.<key>`` for a setting that cannot be measured."""
    sizes = list(section.batch_sizes)
    if not sizes:
        raise ConfigError("needs at least one batch size", "bench_decoding.batch_sizes")
    bad = [b for b in sizes if b < 1]
    if bad:
        raise ConfigError(f"batch sizes must be >= 1, got {bad}", "bench_decoding.batch_sizes")
    for key in ("repeats", "max_new_tokens", "k"):
        value = getattr(section, key)
        if value < 1:
            raise ConfigError(f"must be >= 1, got {value}", f"bench_decoding.{key}")
    if not (math.isfinite(section.alpha) and section.alpha >= 0):
        raise ConfigError(f"must be finite and >= 0, got {section.alpha}", "bench_decoding.alpha")
    if not section.target_ratio > 0:
        raise ConfigError(f"must be > 0, got {section.target_ratio}", "bench_decoding.target_ratio")


def build_pairs(ctx: StageContext, questions: list[str], corpus: Any) -> tuple[list[str], list[str], int]:
    """D²-RAG's relevant-mode prompts for ``questions``: expert = with the top-k context, amateur = closed-book.

    Returns ``(experts, amateurs, no_context)``; ``no_context`` counts the questions retrieval found nothing for
    (their expert prompt is the closed-book one).
    """
    from workbench.methods.base import Tools
    from workbench.methods.common import context_block, prompt_for

    section = ctx.config.bench_decoding
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
    import torch

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
        result = benchmark_contrastive(
            generator,
            experts[:size],
            amateurs[:size],
            max_new_tokens=section.max_new_tokens,
            repeats=section.repeats,
            alpha=section.alpha,
            stop=(),
            target_ratio=section.target_ratio,
            ignore_eos=section.ignore_eos,
        )
        results.append(result)
    bench = {
        "generator": ctx.config.generator.model,
        "device": str(next(generator.model.parameters()).device),
        "dtype": generator.dtype,
        "generator_batch_size": generator.batch_size,
        "threads": torch.get_num_threads(),
        "settings": {
            "split": section.split,
            "batch_sizes": sizes,
            "max_new_tokens": section.max_new_tokens,
            "repeats": section.repeats,
            "alpha": section.alpha,
            "k": section.k,
            "passage_chars": section.passage_chars,
            "retriever": ctx.config.retrieval.retriever,
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


def report_lines(bench: dict[str, Any], name: str) -> list[str]:
    """The Markdown report: settings, one table row per batch size, and what the ratios say in plain words."""
    s = bench["settings"]
    results = bench["results"]
    target = s["target_ratio"]
    lines = [
        "# Contrastive decoding cost",
        "",
        f"Recipe `{name}` (regenerate with `workbench run {name}`). Generator `{bench['generator']}` "
        f"({bench['dtype']}) on **{bench['device']}**, **{bench['threads']} torch thread(s)**, generator batch size "
        f"{bench['generator_batch_size']}. Questions from `{s['split']}`; expert = the answering prompt with the top "
        f"{s['k']} `{s['retriever']}` passages (≤ {s['passage_chars']} characters each), amateur = the closed-book "
        f"prompt (D²-RAG's relevant mode), α = {s['alpha']}. "
        + (
            f"Every answer decodes exactly {s['max_new_tokens']} tokens (stop strings and EOS off: every variant "
            "does the same number of steps)"
            if s.get("ignore_eos")
            else f"Every answer decodes {s['max_new_tokens']} tokens (stop strings off; EOS may end a row sooner, "
            "so the variants may take different numbers of steps)"
        )
        + f"; times are the median of {s['repeats']} run(s) after one warm-up (rounds in rotated order; min–max "
        "in brackets), no generation cache. Compare the ratios, not the absolute times (shared, noisy machines).",
        "",
        "*greedy*: plain greedy decoding of the expert prompts (one forward of B rows per step). *batched*: "
        "contrastive decoding with both streams in one forward of 2B rows per step (the prompts encoded by one "
        "forward per stream, each at its own width, and the KV caches joined). *sequential*: the same "
        "decisions with two decoders (two forwards of B rows per step). Forwards are model calls of one run "
        "(greedy / batched / sequential); parity = batched, sequential and padded chose the same tokens.",
        "",
        "![seconds per variant](seconds.png)",
        "",
        "| pairs | greedy s | batched s | sequential s | batched/greedy | sequential/greedy "
        "| batched speed-up vs sequential | per-forward batched/greedy | forwards (g / b / s) | parity "
        f"| target ≤ {target:g}x met |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in results:
        forwards = " / ".join(str(r["forwards"][v]) for v in VARIANTS)
        lines.append(
            f"| {r['pairs']} | {_timed(r, 'greedy')} | {_timed(r, 'batched')} | {_timed(r, 'sequential')} "
            f"| {fmt(r['ratio_batched_vs_greedy'], 2, suffix='x')} "
            f"| {fmt(r['ratio_sequential_vs_greedy'], 2, suffix='x')} "
            f"| {fmt(r['speedup_batched_vs_sequential'], 2, suffix='x')} "
            f"| {fmt(r['ratio_per_forward_batched_vs_greedy'], 2, suffix='x')} | {forwards} "
            f"| {'yes' if r['parity'] else '**no**'} | {'yes' if r['meets_target'] else '**no**'} |"
        )
    lines += ["", *_verdict(results, target, bench.get("no_context", 0))]
    if all("padded_s" in r for r in results):
        lines += [
            "",
            "Prefill: *batched* encodes each stream's prompts by a forward of its own, each padded to its own width, "
            "and joins the KV caches; *padded* encodes all 2B prompts in one forward padded to the longest one (the "
            "closed-book prompts padded to the width of five passages).",
            "",
            "| pairs | batched (split prefill) s | padded (one prefill forward) s | padded/greedy "
            "| split-prefill speed-up |",
            "|---:|---:|---:|---:|---:|",
            *[
                f"| {r['pairs']} | {_timed(r, 'batched')} | {_timed(r, 'padded')} "
                f"| {fmt(r['ratio_padded_vs_greedy'], 2, suffix='x')} "
                f"| {fmt(r['speedup_split_vs_padded_prefill'], 2, suffix='x')} |"
                for r in results
            ],
        ]
    chunked = [r["pairs"] for r in results if r["pairs"] > bench["generator_batch_size"]]
    if chunked:
        lines += [
            "",
            f"B = {', '.join(map(str, chunked))} exceed(s) the generator batch size {bench['generator_batch_size']}: "
            "those pairs were decoded in chunks (every variant alike), so a step is several forwards there.",
        ]
    return [*lines, ""]


def _timed(result: dict[str, Any], variant: str) -> str:
    """A variant's median seconds with the min–max of its timed runs: ``1.840 (1.801–2.226)``."""
    runs = result.get("times_s", {}).get(variant, [])
    median = f"{result[f'{variant}_s']:.3f}"
    return f"{median} ({min(runs):.3f}–{max(runs):.3f})" if len(runs) > 1 else median


def _verdict(results: list[dict[str, Any]], target: float, no_context: int) -> list[str]:
    """Plain-words paragraphs: is the target met, and what the per-forward ratio says."""
    met = [r["pairs"] for r in results if r["meets_target"]]
    missed = [r["pairs"] for r in results if not r["meets_target"]]
    if not missed:
        target_text = f"The target (batched contrastive ≤ {target:g}x greedy) is **met** at every batch size."
    elif not met:
        target_text = f"The target (batched contrastive ≤ {target:g}x greedy) is **not met** at any batch size."
    else:
        target_text = (
            f"The target (batched contrastive ≤ {target:g}x greedy) is **met** for B = "
            f"{', '.join(map(str, met))} and **not met** for B = {', '.join(map(str, missed))}."
        )
    top = max(results, key=lambda r: r["pairs"])
    headline = (
        f" At the largest batch size (B = {top['pairs']}) batched contrastive decoding takes "
        f"{fmt(top['ratio_batched_vs_greedy'], 2)}x the greedy time, two sequential decoders "
        f"{fmt(top['ratio_sequential_vs_greedy'], 2)}x."
    )
    value = top["ratio_per_forward_batched_vs_greedy"]
    if value is None or not math.isfinite(value):
        forward_text = "The per-forward ratio could not be computed (no forwards were counted)."
    else:
        if value <= 1.15:
            meaning = (
                "about what one of B rows costs: the step is bound by reading the weights and per-call overhead, "
                "not by arithmetic, so the amateur stream rides almost free"
            )
        elif value >= 1.75:
            meaning = (
                "nearly twice one of B rows: the forward is compute-bound at this size, so the amateur stream costs "
                "almost a full extra forward and batching saves little more than per-call overhead over sequential"
            )
        else:
            meaning = (
                "between one and two forwards of B rows: part of each step (weight reads, per-call work) is shared "
                "by both streams, the rest grows with the rows"
            )
        forward_text = (
            f"One batched forward carries 2B rows against greedy's B rows; at B = {top['pairs']} it costs "
            f"{fmt(value, 2)}x a greedy forward, {meaning}. Per-forward times include each step's host-side work "
            "(for contrastive decoding: two log-softmaxes over the vocabulary, two entropies and the rule)."
        )
    paragraphs = [target_text + headline, "", forward_text]
    parity = all(r["parity"] for r in results)
    paragraphs += [
        "",
        "Batched, sequential and padded contrastive decoding chose the same tokens at every batch size."
        if parity
        else "**The contrastive engines chose different tokens** (see `bench.json`): "
        "numerical differences between padded batch shapes can flip near-ties in the arg-max.",
    ]
    if no_context:
        paragraphs += [
            "",
            f"{no_context} question(s) retrieved nothing: their expert prompt is the closed-book prompt.",
        ]
    return paragraphs


def write_plot(bench: dict[str, Any], path: Path) -> None:
    """``path``: median seconds per variant (greedy / batched / sequential) for each batch size."""
    from workbench.plots import grouped_bars

    results = bench["results"]
    grouped_bars(
        path,
        [f"B = {r['pairs']}" for r in results],
        {variant: [r[f"{variant}_s"] for r in results] for variant in PLOTTED if f"{variant}_s" in results[0]},
        title=f"Decoding {bench['settings']['max_new_tokens']} tokens per answer (median seconds)",
        ylabel="seconds",
        ylim=None,
    )


def decoding_section(bench_dir: Path, out_dir: Path, name: str) -> list[str]:
    """The benchmark as a section of a run's main report (``report`` stage), plot ``decoding_seconds.png``."""
    bench = json.loads((bench_dir / "bench.json").read_text())
    write_plot(bench, out_dir / "decoding_seconds.png")
    lines = report_lines(bench, name)
    lines[0] = "## Contrastive decoding cost"
    return [line.replace("(seconds.png)", "(decoding_seconds.png)") for line in lines]


def report(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` and ``seconds.png`` (seconds per variant per batch size) to the report directory."""
    bench = json.loads((ctx.inputs["bench_decoding"] / "bench.json").read_text())
    report_dir = ctx.config.resolved_report_dir
    with atomic_directory(report_dir) as tmp:
        write_plot(bench, tmp / "seconds.png")
        (tmp / "report.md").write_text("\n".join(report_lines(bench, ctx.config.name)), encoding="utf-8")
    return {"report": str(report_dir / "report.md")}


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
) -> dict[str, Any]:
    """Median wall time of plain greedy on the expert prompts vs batched vs sequential contrastive decoding, and of
    the batched engine with both streams prefilled by one padded forward (``padded``: what the split prefill saves).

    Each variant runs once to warm up, then ``repeats`` rounds, round r starting with variant r mod 4 (rotated order:
    none is always first or always right after another); ``times_s`` holds every timed run, the medians and ``spread_s``
    (min, max) come from them. ``ignore_eos`` lets no token end an answer (the generator's ``eos_ids`` emptied for the
    run), so with ``stop=()`` every variant decodes exactly ``max_new_tokens`` tokens: the same work, whatever the
    contrast does to where an answer would end. The generation cache is bypassed and the generator's counter is left
    untouched (all three restored afterwards); the costs and the number of model forward passes of one run of each
    variant are reported. Steps differ between variants when they stop at different places (EOS, ``stop``: contrast
    changes the tokens), so per-step times (greedy steps = answer tokens + 1 for a terminator) and per-forward times are
    given too; ``ratio_per_forward_batched_vs_greedy`` is the cost of one batched forward of 2B rows relative to one of
    B rows. ``ratio_batched_vs_greedy`` is the headline number (target ≤ ``target_ratio``); ``parity`` says whether
    batched, sequential and padded chose the same tokens.
    """
    import statistics
    import time

    import numpy as np

    from workbench.backends.cost import CostCounter
    from workbench.decoding.contrastive import (
        ContrastiveGeneration,
        contrastive_generate,
        sequential_contrastive_generate,
    )

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
    times: dict[str, list[float]] = {name: [] for name in variants}
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
        names = list(variants)
        for r in range(repeats):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                generator.counter = CostCounter()
                began = time.perf_counter()
                variants[name]()
                times[name].append(time.perf_counter() - began)
    finally:
        hook.remove()
        generator.cache, generator.counter, generator.eos_ids = saved_cache, saved_counter, saved_eos
    median = {name: statistics.median(values) for name, values in times.items()}
    steps = {
        "greedy": sum(len(g.token_ids) + (g.finish_reason != "length") for g in outputs["greedy"]),
        **{name: sum(g.steps for g in outputs[name]) for name in ("batched", "sequential", "padded")},
    }
    ratio = median["batched"] / median["greedy"] if median["greedy"] > 0 else float("nan")
    per_forward = {k: (median[k] / forwards[k] if forwards[k] else None) for k in median}
    return {
        "pairs": len(experts),
        "max_new_tokens": max_new_tokens,
        "repeats": repeats,
        "alpha": alpha,
        "greedy_s": median["greedy"],
        "batched_s": median["batched"],
        "sequential_s": median["sequential"],
        "padded_s": median["padded"],
        "times_s": times,
        "spread_s": {name: (min(values), max(values)) for name, values in times.items()},
        "ignore_eos": ignore_eos,
        "ratio_batched_vs_greedy": ratio,
        "ratio_sequential_vs_greedy": median["sequential"] / median["greedy"] if median["greedy"] > 0 else None,
        "speedup_batched_vs_sequential": median["sequential"] / median["batched"] if median["batched"] > 0 else None,
        "ratio_padded_vs_greedy": median["padded"] / median["greedy"] if median["greedy"] > 0 else None,
        "speedup_split_vs_padded_prefill": median["padded"] / median["batched"] if median["batched"] > 0 else None,
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
