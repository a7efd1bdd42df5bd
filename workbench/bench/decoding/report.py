"""The contrastive-decoding benchmark report (``report_bench_decoding``, and a section of a run's main report): what
contrastive decoding costs over plain greedy per batch size, as Markdown lines and a bar plot of the seconds per
variant (from the ``bench_decoding`` stage's ``bench.json``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from workbench.core.formatting import fmt
from workbench.reports.section import Section, SectionInput

VARIANTS = ("greedy", "batched", "sequential")  # the main table's forwards column
PLOTTED = (*VARIANTS, "padded")


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
        + f"; times are the median of {_runs(bench)} run(s) after one warm-up (rounds in rotated order; min–max "
        "in brackets), no generation cache. Compare the ratios, not the absolute times (shared, noisy machines).",
        "",
        "*greedy*: plain greedy decoding of the expert prompts (one forward of B rows per step). *batched*: "
        "contrastive decoding with both streams in one forward of 2B rows per step (the prompts encoded by one "
        "forward per stream, each at its own width, the amateurs continuing the experts' rows over the system "
        "prompt where that saves more tokens, and the KV caches joined with room for the answer). *sequential*: "
        "the same decisions with two decoders (two forwards of B rows per step). Forwards are model calls of one run "
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
            "closed-book prompts padded to the width of five passages; no prefix reuse).",
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


def _runs(bench: dict[str, Any]) -> str:
    """The timed rounds per batch size: one number, or one per size ("6 / 3 / 3") when ``min_seconds`` added some."""
    rounds = [r.get("repeats", bench["settings"]["repeats"]) for r in bench["results"]]
    if len(set(rounds)) == 1:
        return str(rounds[0])
    return " / ".join(map(str, rounds)) + " (B = " + " / ".join(str(r["pairs"]) for r in bench["results"]) + ")"


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


def write_seconds_plot(bench: dict[str, Any], path: Path) -> None:
    """``path``: median seconds per variant (greedy / batched / sequential, and padded when measured) for each batch
    size of ``bench`` (a ``bench_decoding`` ``bench.json``)."""
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


def write_decoding_report(bench: dict[str, Any], out_dir: Path, *, name: str) -> Path:
    """Write ``report.md`` (:func:`report_lines`; ``name`` is the recipe that regenerates it) and ``seconds.png``
    (:func:`write_seconds_plot`) for the benchmark record ``bench`` into ``out_dir``. Returns the ``report.md``
    path."""
    write_seconds_plot(bench, out_dir / "seconds.png")
    (out_dir / "report.md").write_text("\n".join(report_lines(bench, name)), encoding="utf-8")
    return out_dir / "report.md"


def decoding_section(bench_dir: Path, out_dir: Path, name: str) -> list[str]:
    """The benchmark in ``bench_dir`` (its ``bench.json``) as a section of a run's main report (``report`` stage):
    :func:`report_lines` under the heading "Contrastive decoding cost", the plot saved as
    ``out_dir/decoding_seconds.png``."""
    bench = json.loads((bench_dir / "bench.json").read_text())
    write_seconds_plot(bench, out_dir / "decoding_seconds.png")
    lines = report_lines(bench, name)
    lines[0] = "## Contrastive decoding cost"
    return [line.replace("(seconds.png)", "(decoding_seconds.png)") for line in lines]


def section(view: SectionInput) -> Section:
    """The ``bench_decoding`` stage's section of the run's main report (:func:`decoding_section`)."""
    return Section(decoding_section(view.stage_dir, view.out_dir, view.config.name))
