"""The backends benchmark report (``report_bench``): greedy and shared-prefill generation speed, the NLI judges and
the retrievers, as ``report.md`` and ``speedup.png`` (from the ``bench_backends`` stage's ``bench.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.reports.nli import judge_table_lines


def generation_lines(gen: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    """Markdown rows: greedy speed and shared-prefill vs re-encoding for each prompt style."""
    n = settings["samples"]
    lines = [
        f"| prompt style | prompts | prompt tokens | greedy tok/s | {n} samples, shared prefill: s (tok/s) "
        f"| {n} samples, re-encoded: s (tok/s) | speed-up | prefill tokens saved |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for style, row in gen.items():
        lines.append(
            f"| {style} | {row['prompts']} | {row['prompt_tokens_mean']:.0f} | {row['greedy_tokens_per_s']:.1f} "
            f"| {row['shared_seconds']:.1f} ({row['shared_tokens_per_s']:.1f}) "
            f"| {row['naive_seconds']:.1f} ({row['naive_tokens_per_s']:.1f}) | **{row['speedup']:.2f}x** "
            f"| {row['prefill_ratio']:.0f}x fewer |"
        )
    return lines


def retrieval_lines(ret: dict[str, Any]) -> list[str]:
    """Markdown rows: index build time, queries/s and recall@k per retriever."""
    names = [k for k, v in ret.items() if isinstance(v, dict)]
    ks = [k for k in ret[names[0]] if k.startswith("recall@")]
    lines = [
        "| retriever | index build s | queries/s | " + " | ".join(ks) + " |",
        "|---|---:|---:|" + "---:|" * len(ks),
    ]
    for name in names:
        row = ret[name]
        cells = " | ".join(f"{row[k]:.3f}" for k in ks)
        lines.append(f"| {name} | {row['build_seconds']:.1f} | {row['queries_per_s']:.1f} | {cells} |")
    return lines


def write_backends_report(bench: dict[str, Any], out_dir: Path, *, name: str, rerun: str) -> Path:
    """Write ``report.md`` and ``speedup.png`` for the benchmark record ``bench`` into ``out_dir``; ``name`` titles
    the report and ``rerun`` is the command that regenerates it. Returns the ``report.md`` path."""
    from workbench.plots import grouped_bars

    settings, gen, ret = bench["settings"], bench["generation"], bench["retrieval"]
    grouped_bars(
        out_dir / "speedup.png",
        list(gen),
        {
            "shared prefill": [1.0] * len(gen),
            "re-encoded (time ratio)": [row["naive_seconds"] / row["shared_seconds"] for row in gen.values()],
        },
        title=f"{settings['samples']} samples per prompt: wall time relative to shared prefill",
        ylabel="relative time",
        ylim=None,
    )
    lines = [
        f"# {name} report",
        "",
        f"Regenerate with `{rerun}`. Generator `{bench['generator']}`, "
        f"**{bench['threads']} torch thread(s)**, no generation cache, median of {settings['repeats']} runs; "
        "compare the ratios, not the absolute times (these machines are shared and noisy).",
        "",
        "## Generator: one shared prefill for N samples vs N re-encodings",
        "",
        f"{settings['samples']} samples of {settings['max_new_tokens']} tokens at T={settings['temperature']} "
        "per prompt, EOS and stop strings ignored. Both variants use the same per-sample seeds, so they produce "
        "the same tokens; only the prompt encoding differs.",
        "",
        *generation_lines(gen, settings),
        "",
        "![speed-up](speedup.png)",
        "",
        "## NLI judges",
        "",
        *judge_table_lines(bench["nli"]),
        "",
        "## Retrieval",
        "",
        f"{ret['queries']} wiki-qa test questions against {ret['passages']} passages (every gold passage plus a "
        "random sample of the corpus); recall@k = the gold passage is among the top k.",
        "",
        *retrieval_lines(ret),
        "",
    ]
    (out_dir / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return out_dir / "report.md"
