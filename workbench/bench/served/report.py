"""The served-models benchmark report (``report_bench_served``): throughput per engine and concurrency, the probed
capabilities, and each feature's agreement with the in-process values, as ``report.md`` and ``throughput.png``
(from the ``bench_served`` stage's ``bench.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from workbench.plots import grouped_bars

GOAL_VS_IN_PROCESS = 0.8
"""serve-model at the highest concurrency collects at least this share of the in-process batched rate."""
GOAL_VS_OWN_LOWEST = 3.0
"""... and at least this many times its own rate at the lowest concurrency."""


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "—" if value is None or (isinstance(value, float) and not np.isfinite(value)) else format(value, spec)


def report_lines(bench: dict[str, Any]) -> list[str]:
    """The report's Markdown body: throughput per engine and concurrency, capabilities, agreement per feature."""
    engines = bench["engines"]
    levels = [str(c) for c in bench["settings"]["concurrency"]]
    lines = [
        "## Throughput",
        "",
        f"{bench['questions']} questions, {len(bench['features'])} features each; questions/s (higher is better). "
        f"In-process: the generator loaded here, batch size {bench['in_process']['batch_size']}.",
        "",
        "| engine | " + " | ".join(f"concurrency {c}" for c in levels) + " | top vs in-process | top vs own lowest |",
        "|---|" + "---:|" * (len(levels) + 2),
        f"| in-process (batched) | {_fmt(bench['in_process']['questions_per_s'], '.2f')} "
        + "| " * (len(levels) - 1)
        + "| 1.00x | — |",
    ]
    for name, row in engines.items():
        cells = " | ".join(_fmt(row["rates"].get(c, {}).get("questions_per_s"), ".2f") for c in levels)
        lines.append(f"| {name} | {cells} | {row['vs_in_process']:.2f}x | {row['vs_own_lowest']:.2f}x |")
    for name, why in bench.get("not_run", {}).items():
        lines.append(f"| {name} | not run: {why} |" + " |" * (len(levels) + 1))
    for name, row in engines.items():
        single = row.get("one_prompt_per_request") or {}
        if single:
            cells = ", ".join(f"{_fmt(v['questions_per_s'], '.2f')} at concurrency {c}" for c, v in single.items())
            lines += [
                "",
                f"`{name}` with one prompt per request (a client that does not send prompt lists): {cells} — what "
                "the server's batching across concurrent requests buys; the rows above send "
                f"{bench['in_process']['batch_size']} prompts per request.",
            ]
    for name in SERVE_MODEL_ENGINES:
        if name in engines:
            lines += _goal_lines(name, engines[name], bench, levels)
    lines += collection_lines(bench)
    lines += _streamed_lines(engines, levels)
    lines += ["", "## Capabilities probed", ""]
    if engines:
        caps = list(next(iter(engines.values()))["capabilities"])
        lines += ["| engine | " + " | ".join(caps) + " |", "|---|" + "---|" * len(caps)]
        for name, row in engines.items():
            lines.append(f"| {name} | " + " | ".join(str(row["capabilities"][c]) for c in caps) + " |")
    lines += [
        "",
        "## Agreement with the in-process values",
        "",
        "Per feature: Spearman ρ of the served values against the in-process ones, the largest absolute difference, "
        f"and the AUROC of each for the greedy answer's correctness (accuracy {bench['accuracy']:.2f}).",
        "",
    ]
    if {"llama_cpp", "llama_server"} & set(engines):
        lines += [
            "llama.cpp computes with the GGUF file's quantised (Q4_1) weights in quantised matrix products; the "
            "in-process model holds the same weights dequantised to float32. And llama.cpp draws its samples with "
            "its own sampler and random numbers, so the features computed from samples (entropy, semantic entropy, "
            "the graph features; P(True) and Verbalized Confidence, whose prompt lists the samples) agree only in "
            "distribution, question by question noisy at N = 5. Its agreement is approximate by construction.",
            "",
        ]
    if any(name.startswith("serve_model") for name in engines):
        lines += [
            "serve-model runs the same float32 model with the same seeds: each sample draws the random numbers it "
            "draws in-process. Its logits differ from the in-process ones only by float rounding where a batch is "
            "shaped otherwise (continuous batching joins requests as they arrive, so its shapes vary run to run), "
            "and that can flip a sampled token whose draw falls at the edge between two tokens; that question's "
            "sample-based features (and P(True) and Verbalized Confidence, whose prompt lists the samples) then "
            "differ. Greedy answers and the features read from them agree to rounding.",
            "",
        ]
    for name, row in engines.items():
        agree = row["agreement"]
        lines += [
            f"### {name}",
            "",
            f"Identical greedy answers: {agree['greedy_identical']:.0%}. {_option_reads(row)}",
            "",
            "| feature | Spearman ρ | max abs diff | AUROC in-process | AUROC served | Δ AUROC |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for feature in bench["features"]:
            if feature in row["skipped"]:
                lines.append(f"| {feature} | not served: needs {', '.join(row['skipped'][feature])} | | | | |")
                continue
            a = agree[feature]
            lines.append(
                f"| {feature} | {_fmt(a['spearman'])} | {_fmt(a['max_abs_diff'], '.2g')} "
                f"| {_fmt(a['auroc_in_process'])} | {_fmt(a['auroc_served'])} | {_fmt(a['auroc_diff'], '+.3f')} |"
            )
        lines.append("")
    return lines


SERVE_MODEL_ENGINES = ("serve_model_continuous", "serve_model")
"""The engines that are ``workbench serve-model`` (its default, continuous batching, first); the goals are theirs."""


def _goal_lines(name: str, row: dict[str, Any], bench: dict[str, Any], levels: list[str]) -> list[str]:
    """The issue's goals for one serve-model engine at the highest concurrency: single-prompt requests vs the
    in-process batched rate, and the collection vs in-process and vs its own lowest concurrency, each met or
    missed."""
    top, lines = levels[-1], []
    single = (row.get("one_prompt_per_request") or {}).get(top)
    if single:
        share = single["questions_per_s"] / bench["in_process"]["questions_per_s"]
        lines += [
            "",
            f"`{name}`: single-prompt requests at concurrency {top}: {share:.2f}x the in-process batched rate "
            f"(goal ≥ {GOAL_VS_IN_PROCESS:.1f}x: **{'met' if share >= GOAL_VS_IN_PROCESS else 'missed'}**).",
        ]
    return [
        *lines,
        "",
        f"Goals for `{name}` at concurrency {top}: ≥ {GOAL_VS_IN_PROCESS:.1f}x the in-process batched rate — "
        f"**{row['vs_in_process']:.2f}x, {'met' if row['vs_in_process'] >= GOAL_VS_IN_PROCESS else 'missed'}**; "
        f"≥ {GOAL_VS_OWN_LOWEST:.0f}x its own concurrency-{levels[0]} rate — **{row['vs_own_lowest']:.2f}x, "
        f"{'met' if row['vs_own_lowest'] >= GOAL_VS_OWN_LOWEST else 'missed'}**.",
    ]


def _streamed_lines(engines: dict[str, Any], levels: list[str]) -> list[str]:
    """The streaming table: per engine and concurrency, time to first token and whole-request latency (p50 / p95)
    and tokens/s of one-question streamed chat requests; then the time to first token at the lowest and highest
    concurrency in one line per engine."""
    streamed = {name: row["streamed"] for name, row in engines.items() if row.get("streamed")}
    if not streamed:
        return []
    lines = [
        "",
        "## Streaming",
        "",
        "One-question chat requests with `stream: true` (greedy), a closed loop at each concurrency: time to the first "
        "chunk with text (TTFT), to the end of the stream, and completion tokens per second. "
        "`serve_model_continuous` (`serve-model`, continuous batching) sends each token as it is decoded; "
        "`serve_model` (`--no-continuous`, request level) computes the answer whole first, so its TTFT is close to "
        "its latency. *resent*: requests sent again on a new connection because the server had closed the kept-alive "
        "one (llama-server does, now and then), as the `openai` client does.",
        "",
        "| engine | concurrency | TTFT p50 s | TTFT p95 s | latency p50 s | latency p95 s | tokens/s | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, loads in streamed.items():
        for c in levels:
            m = loads.get(c)
            if m:
                lines.append(
                    f"| {name} | {c} | {_fmt(m['ttft_p50_s'])} | {_fmt(m['ttft_p95_s'])} | {_fmt(m['p50_s'])} "
                    f"| {_fmt(m['p95_s'])} | {_fmt(m['tokens_per_s'], '.1f')} | {m['errors']}"
                    f"{f' ({resent} resent)' if (resent := m.get('reconnects')) else ''} |"
                )
    for name, loads in streamed.items():
        low, top = loads.get(levels[0]), loads.get(levels[-1])
        if low and top:
            lines += [
                "",
                f"`{name}`: time to first token at concurrency {levels[0]} / {levels[-1]}: "
                f"{_fmt(low['ttft_p50_s'])} s / {_fmt(top['ttft_p50_s'])} s (p50).",
            ]
    return lines


def collection_lines(bench: dict[str, Any]) -> list[str]:
    """One line per engine, in this exact form: "served collection at concurrency N: N.NNx in-process" — its rate at
    the highest concurrency measured over the in-process batched rate (issue 46's goal for ``serve-model``: at least
    :data:`GOAL_VS_IN_PROCESS`)."""
    top = max(int(c) for c in bench["settings"]["concurrency"])
    base = bench["in_process"]["questions_per_s"]
    lines = []
    for name, row in bench["engines"].items():
        rate = row["rates"].get(str(top), {}).get("questions_per_s")
        if rate is not None and base:
            lines += ["", f"`{name}`: served collection at concurrency {top}: {rate / base:.2f}x in-process"]
    return lines


def _option_reads(row: dict[str, Any]) -> str:
    """How an engine's next-token option reads (P(True), verbalized confidence) were answered."""
    reads = row.get("option_reads") or {}
    return (
        f"Next-token option reads: {reads.get('top_k', 0)} from the top k, {reads.get('teacher_forced', 0)} "
        f"teacher-forced with echo, {reads.get('absent', 0)} absent (NaN: no echo)."
    )


def write_served_report(bench: dict[str, Any], out_dir: Path, *, name: str, rerun: str) -> Path:
    """Write ``report.md`` (:func:`report_lines` under a header) and ``throughput.png`` (questions/s per engine and
    concurrency) for the benchmark record ``bench`` into ``out_dir``; ``name`` titles the report and ``rerun`` is the
    command that regenerates it. Returns the ``report.md`` path."""

    levels = [str(c) for c in bench["settings"]["concurrency"]]
    series = {"in-process": [bench["in_process"]["questions_per_s"]] * len(levels)}
    for engine, row in bench["engines"].items():
        series[engine] = [row["rates"][c]["questions_per_s"] for c in levels]
    grouped_bars(
        out_dir / "throughput.png",
        [f"concurrency {c}" for c in levels],
        series,
        title="features collected: questions/s",
        ylabel="questions / s",
        ylim=None,
    )
    lines = [
        f"# {name} report",
        "",
        f"Regenerate with `{rerun}`. Generator `{bench['generator']}`, **{bench['threads']} torch "
        "thread(s)** in this process; each server ran as its own process on the same machine. No generation "
        "cache. Compare the ratios, not the absolute rates (these machines are shared and noisy).",
        "",
        *report_lines(bench),
        "![throughput](throughput.png)",
        "",
    ]
    (out_dir / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return out_dir / "report.md"
