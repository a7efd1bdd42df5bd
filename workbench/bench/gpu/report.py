"""The GPU benchmark report (``report_bench_gpu``): from the ``bench_gpu`` stage's ``bench.json``, either a short
page saying the stage skipped, why and on what machine, or the card, the versions and one table and plot per
measurement — (a) collection, (b) serve-model, (c) contrastive decoding vs greedy — with (d) peak memory in each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.core.formatting import MISSING, fmt, markdown_table


def _spread(entry: dict[str, Any]) -> str:
    """An entry's median seconds with the min–max of its timed runs: ``1.840 (1.801–2.226)``."""
    runs = entry.get("seconds_runs") or []
    median = fmt(entry["seconds"], 3)
    return f"{median} ({min(runs):.3f}–{max(runs):.3f})" if len(runs) > 1 else median


def _timed(result: dict[str, Any], variant: str) -> str:
    """A decoding variant's median seconds with the min–max of its timed runs."""
    runs = result.get("times_s", {}).get(variant, [])
    median = fmt(result[f"{variant}_s"], 3)
    return f"{median} ({min(runs):.3f}–{max(runs):.3f})" if len(runs) > 1 else median


def _mib(value: float | None) -> str:
    return fmt(value, 0)


def _rate_cells(model: dict[str, Any], entry: dict[str, Any], level: str) -> list[str]:
    """The first cells of a throughput row (collection per batch size, serve-model per concurrency): the model, the
    entry's ``level``, its questions, questions/s and seconds (:func:`_spread`)."""
    return [
        f"`{model['name']}`",
        str(entry[level]),
        str(entry["questions"]),
        fmt(entry["questions_per_s"], 2),
        _spread(entry),
    ]


def skipped_lines(bench: dict[str, Any], name: str, rerun: str) -> list[str]:
    """The report of a skipped run: the reason, the machine, and where figures come from."""
    m = bench.get("machine", {})
    build = m.get("torch_cuda") or "none (a CPU build)"
    return [
        "# GPU benchmark: skipped",
        "",
        f"Recipe `{name}` (`{rerun}`). The `bench_gpu` stage measured nothing: {bench['reason']}.",
        "",
        f"Machine: {m.get('platform', '?')} ({m.get('machine', '?')}), {m.get('cpus', '?')} CPU(s), Python "
        f"{m.get('python', '?')}, torch {m.get('torch', '?')} (CUDA build: {build}).",
        "",
        "Figures come only from a run on a machine with a CUDA GPU, and such a report names its card: run "
        f"`workbench run {name}` there (`--force bench_gpu` measures again where this skip is cached).",
        "",
    ]


def _header(bench: dict[str, Any], name: str, rerun: str) -> list[str]:
    d, m, s = bench["device"], bench["machine"], bench["settings"]
    if d["kind"] == "cuda":
        card = (
            f"**{d['name']}** (`{d['device']}`, {d['memory_gib']:.0f} GiB, compute capability {d['capability']}); "
            f"torch {d['torch']}, CUDA {d['cuda']}, cuDNN {d['cudnn']}"
        )
    else:
        card = (
            f"**CPU** ({d['name']}; torch {d['torch']}) — `bench_gpu.device: cpu` is for the unit tests: these "
            "figures say nothing about a GPU"
        )
    return [
        "# GPU benchmark",
        "",
        f"Recipe `{name}` (regenerate with `{rerun}`). Device: {card}. Weights and activations in "
        f"**{bench['dtype']}**; **{bench['threads']} torch CPU thread(s)**; {m['platform']}, {m['cpus']} CPU(s).",
        "",
        "Every model is built from its config with **random weights** (timings and memory only: random weights "
        f"answer nothing) and the tokenizer of `{bench['tokenizer']}`, saved and loaded by the workbench's own "
        f"generator, with no generation or embedding cache. Embedder `{bench['embedder']}` on the same device, NLI "
        f"judge `{bench['nli_judge']}`. Times are the median of {s['repeats']} run(s) after one warm-up (min–max in "
        f"brackets). Each measurement runs over {s['questions']} questions, or as many as its batch needs to be full.",
        "",
        *(
            [
                "**Partial run** (`bench.partial.json`): the stage was cut short; the tables hold the measurements it "
                "finished, and a model or measurement missing below was not reached.",
                "",
            ]
            if bench.get("partial")
            else []
        ),
    ]


def _models_table(models: list[dict[str, Any]]) -> list[str]:
    rows = []
    for model in models:
        sh = model["shape"]
        rows.append(
            [
                f"`{model['name']}`",
                sh["what"],
                str(sh["layers"]),
                str(sh["hidden"]),
                f"{sh['heads']} ({sh['kv_heads']})",
                str(sh["intermediate"]),
                str(sh["vocab"]),
                f"{model['parameters'] / 1e6:.1f} M",
                _mib(model["weights_mb"]),
            ]
        )
    header = ["model", "shape", "layers", "hidden", "heads (kv)", "intermediate", "vocab", "parameters", "weights MiB"]
    return ["## Models", "", *markdown_table(header, rows, "ll" + "r" * 7), ""]


def _collection_lines(bench: dict[str, Any]) -> list[str]:
    s = bench["settings"]
    rows = [
        [
            *_rate_cells(model, c, "batch_size"),
            fmt(c["token_forwards"], 0),
            fmt(c["lm_calls"], 0),
            fmt(c["nli_pairs"], 0),
            _mib(c["peak_memory_mb"]),
        ]
        for model in bench["models"]
        for c in model["collection"]
    ]
    header = [
        "model",
        "batch size",
        "questions",
        "questions/s",
        "seconds",
        "token-forwards",
        "LM calls",
        "NLI pairs",
        "peak MiB",
    ]
    return [
        "## (a) Feature collection in process",
        "",
        f"All {len(s['features'])} features of `bench_gpu.features` by the stats graph, as `bench-features` times its "
        f"*workbench* way (every stat once per question, batched): greedy answer + {s['samples']} samples at T = "
        f"{s['temperature']:g}, ≤ {s['max_new_tokens']} tokens each, {s['paraphrases']} paraphrases. The batch size is "
        "the generator's (prompts per forward batch, each expanded to its samples).",
        "",
        *markdown_table(header, rows),
        "",
        "![collection: questions/s per batch size](collection.png)",
        "",
    ]


def _serve_lines(bench: dict[str, Any]) -> list[str]:
    served = [m for m in bench["models"] if m.get("serve")]
    if not served:
        return ["## (b) serve-model", "", "Not measured (`bench_gpu.concurrency: []`).", ""]
    s = bench["settings"]
    first = served[0]["serve"]
    skipped = first["skipped"]
    left_out = (
        "; left out, as the OpenAI protocol cannot give them: "
        + ", ".join(f"`{f}` (needs {', '.join(needs)})" for f, needs in skipped.items())
        if skipped
        else ""
    )
    rows = [
        [*_rate_cells(model, level, "concurrency"), _mib(level["server_memory_mb"])]
        for model in served
        for level in model["serve"]["levels"]
    ]
    header = ["model", "concurrency", "questions", "questions/s", "seconds", "server GPU MiB"]
    return [
        "## (b) serve-model",
        "",
        "`workbench serve-model` on the same model directory, a process of its own on the same device (generator "
        f"batch size {first['server_batch_size']}), reached by the served generator with "
        f"{s['serve_prompts_per_request']} prompt(s) per request and the concurrency below in flight. It collects "
        f"the {len(first['features'])} feature(s) a served model can give{left_out}; so its rate is not the "
        "in-process rate of (a) over the same work.",
        "",
        *markdown_table(header, rows),
        "",
        "![serve-model: questions/s per concurrency](serve.png)",
        "",
    ]


def _decoding_lines(bench: dict[str, Any]) -> list[str]:
    decoded = [m for m in bench["models"] if m["decoding"]]
    if not decoded:
        return ["## (c) Contrastive decoding vs greedy", "", "Not measured (`bench_gpu.decode_batch_sizes: []`).", ""]
    s = bench["settings"]
    rows = [
        [
            f"`{model['name']}`",
            str(r["pairs"]),
            _timed(r, "greedy"),
            _timed(r, "batched"),
            _timed(r, "sequential"),
            fmt(r["ratio_batched_vs_greedy"], 2, suffix="x"),
            fmt(r["ratio_sequential_vs_greedy"], 2, suffix="x"),
            fmt(r["ratio_per_forward_batched_vs_greedy"], 2, suffix="x"),
            "yes" if r["parity"] else "**no**",
            _mib(r["peak_memory_mb"]),
        ]
        for model in decoded
        for r in model["decoding"]
    ]
    header = [
        "model",
        "pairs",
        "greedy s",
        "batched s",
        "sequential s",
        "batched/greedy",
        "sequential/greedy",
        "per-forward batched/greedy",
        "parity",
        "peak MiB",
    ]
    no_context = bench.get("no_context", 0)
    return [
        "## (c) Contrastive decoding vs greedy",
        "",
        f"`bench-decoding`'s measurement: D²-RAG's relevant-mode pairs (expert: the answering prompt with the top "
        f"{s['k']} `{bench['retriever']}` passages, ≤ {s['passage_chars']} characters each; amateur: the closed-book "
        f"prompt), α = {s['alpha']:g}, exactly {s['max_new_tokens']} tokens per answer (EOS and stop strings off). "
        "*greedy*: the expert prompts alone; *batched*: both streams in one forward of 2B rows per step; "
        "*sequential*: two decoders. Parity: batched, sequential and padded contrastive decoding chose the same "
        "tokens. Random weights make next-token distributions nearly flat, so low-precision rounding can flip "
        "near-ties between batch shapes: a **no** here may be that rather than a difference between the engines "
        "(`bench-decoding` checks parity on real weights)."
        + (f" {no_context} question(s) retrieved nothing (their expert prompt is closed-book)." if no_context else ""),
        "",
        *markdown_table(header, rows),
        "",
        "![contrastive decoding: batched / greedy time per batch size](decoding.png)",
        "",
    ]


MEMORY_NOTE = [
    "## (d) Peak memory",
    "",
    "*peak MiB*: `torch.cuda.max_memory_allocated`, its counter reset before each measurement (the warm-up run "
    "included). *weights MiB*: allocated right after the model loaded. *server GPU MiB*: `serve-model` is another "
    "process, so this is the GPU memory in use on the device after the measurement less what was in use before the "
    "server started (`cudaMemGetInfo`: its caching allocator's reserve and CUDA context included), not "
    f"`max_memory_allocated`. On a CPU none is measured ({MISSING}).",
    "",
]


def report_lines(bench: dict[str, Any], name: str, rerun: str) -> list[str]:
    """The Markdown report of ``bench`` (a ``bench_gpu`` ``bench.json``): :func:`skipped_lines` when the stage skipped,
    else the device and versions, the models, one section per measurement and the memory note."""
    if bench.get("skipped"):
        return skipped_lines(bench, name, rerun)
    return [
        *_header(bench, name, rerun),
        *_models_table(bench["models"]),
        *_collection_lines(bench),
        *_serve_lines(bench),
        *_decoding_lines(bench),
        *MEMORY_NOTE,
    ]


def _aligned(
    models: list[dict[str, Any]], entries: str | tuple[str, str], level: str, value: str
) -> tuple[list[int], dict[str, list[float]]]:
    """The levels any model measured (sorted) and, per model, its ``value`` at each (NaN where it measured none):
    models of one report can differ (a run cut short, runs joined with other settings). ``entries`` names each model's
    list of measurements (a key, or a key path)."""

    def rows(model: dict[str, Any]) -> list[dict[str, Any]]:
        return model[entries] if isinstance(entries, str) else model[entries[0]][entries[1]]

    levels = sorted({int(r[level]) for m in models for r in rows(m)})
    series = {}
    for m in models:
        by_level = {int(r[level]): r[value] for r in rows(m)}
        series[m["name"]] = [float(by_level[x] or 0.0) if x in by_level else float("nan") for x in levels]
    return levels, series


def _bar_plot(
    path: Path,
    models: list[dict[str, Any]],
    measured: tuple[str | tuple[str, str], str, str],
    *,
    tick: str,
    title: str,
    ylabel: str = "questions / s",
) -> Path:
    """A grouped-bar plot at ``path``, one bar per model: ``measured`` is ``(entries, level, value)`` of
    :func:`_aligned`; ``tick`` formats a level (``"B = {}"``). Returns ``path``."""
    from workbench.plots import grouped_bars

    levels, series = _aligned(models, *measured)
    grouped_bars(path, [tick.format(x) for x in levels], series, title=title, ylabel=ylabel, ylim=None)
    return path


def write_plots(bench: dict[str, Any], out_dir: Path) -> list[Path]:
    """The measured run's plots in ``out_dir``: ``collection.png`` (questions/s per batch size, one bar per model),
    ``serve.png`` (questions/s per concurrency) and ``decoding.png`` (batched contrastive / greedy time per B), each
    only when its measurement ran. Returns the paths written."""
    models = bench["models"]
    title = f"(a) {len(bench['settings']['features'])} features collected in process: questions/s"
    measured: tuple[str | tuple[str, str], str, str] = ("collection", "batch_size", "questions_per_s")
    written = [_bar_plot(out_dir / "collection.png", models, measured, tick="B = {}", title=title)]
    served = [m for m in models if m.get("serve")]
    if served:
        measured = (("serve", "levels"), "concurrency", "questions_per_s")
        title = "(b) serve-model: questions/s"
        written.append(_bar_plot(out_dir / "serve.png", served, measured, tick="concurrency {}", title=title))
    decoded = [m for m in models if m["decoding"]]
    if decoded:
        measured = ("decoding", "pairs", "ratio_batched_vs_greedy")
        title = "(c) contrastive decoding: batched time / greedy time"
        written.append(
            _bar_plot(out_dir / "decoding.png", decoded, measured, tick="B = {}", title=title, ylabel="x greedy")
        )
    return written


def write_gpu_report(bench: dict[str, Any], out_dir: Path, *, name: str, rerun: str) -> Path:
    """Write ``report.md`` (:func:`report_lines`; ``name`` titles it, ``rerun`` is the command that regenerates it)
    and, for a measured run, its plots (:func:`write_plots`) into ``out_dir``. Returns the ``report.md`` path."""
    if not bench.get("skipped"):
        write_plots(bench, out_dir)
    (out_dir / "report.md").write_text("\n".join(report_lines(bench, name, rerun)), encoding="utf-8")
    return out_dir / "report.md"
