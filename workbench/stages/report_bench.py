"""Stage ``report_bench``: the backends benchmark as Markdown tables and a PNG."""

from __future__ import annotations

import json
from typing import Any

from workbench.core.atomic import atomic_directory
from workbench.stages.context import StageContext
from workbench.stages.nli_eval import judge_table_lines


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


def run(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` and ``speedup.png`` to the report directory."""
    from workbench.plots import grouped_bars

    bench = json.loads((ctx.inputs["bench_backends"] / "bench.json").read_text())
    settings, gen, ret = bench["settings"], bench["generation"], bench["retrieval"]
    report_dir = ctx.config.resolved_report_dir
    with atomic_directory(report_dir) as tmp:
        grouped_bars(
            tmp / "speedup.png",
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
            f"# {ctx.config.name} report",
            "",
            f"Regenerate with `{ctx.rerun}`. Generator `{bench['generator']}`, "
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
        (tmp / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return {"report": str(report_dir / "report.md")}
