"""The feature-cost benchmark report (``report_bench_features``): what collecting the D²-RAG features costs the
workbench against a per-feature library, the bare generation they need and each feature alone, every ratio against
its target, as ``report.md`` and ``per_feature.png`` (from the ``bench_features`` stage's ``bench.json``).

The targets are stated here; :data:`SELF_PROMPTING` is also the set the stage leaves out of its "workbench core" way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.core.formatting import fmt

SELF_PROMPTING = ("self_detection", "ptrue", "verbalized_confidence")  # features that prompt the model themselves
TARGETS = {  # issues 15 and 31: the whole collection against the generation it needs
    "workbench_over_bare": 2.5,  # all features vs the engine's bare greedy + N samples (issue 15 asked 2x)
    "workbench_core_over_bare": 1.15,  # the same without the self-prompting features
    "workbench_over_naive": 1.0,  # all features vs plain transformers generate(num_return_sequences=N)
}
LIBRARY_TARGET = 5.0  # per-feature library / workbench, at least
# Context for the naive ratio, NOT measured by this stage: an earlier session of this project ran the peer libraries
# on SmolLM2-135M (N = 10 samples, 32 new tokens, 2 threads; MiniLM stand-ins for their auxiliary scorers).
PEER_CONTEXT = (("TruthTorchLM 0.1.19, its 18 D²-RAG methods in one call", 5.9), ("LM-Polygraph 0.7.0", 4.4))


def _seconds(cost: dict[str, Any]) -> str:
    """Median wall time with its spread over the timed runs: ``22.7 (21.9–24.0)``; one run: the time alone."""
    digits = 2 if cost["seconds"] < 10 else 1
    if "seconds_min" not in cost or len(cost.get("seconds_runs", ())) < 2:
        return f"{cost['seconds']:.{digits}f}"
    return f"{cost['seconds']:.{digits}f} ({cost['seconds_min']:.{digits}f}–{cost['seconds_max']:.{digits}f})"


def _verdict(value: float | None, ok: Callable[[float], bool]) -> str:
    return "n/a" if value is None else ("met" if ok(value) else "**not met**")


def bare_lines(bench: dict[str, Any]) -> list[str]:
    """The section comparing the whole collection with the generation it needs: the engine's bare greedy answer +
    N samples, the same the naive way (plain transformers ``generate``), and the collection without the
    self-prompting features; each ratio with its target (:data:`TARGETS`) and the peer libraries as context."""
    ratios = bench["ratios"]
    n_all, core = len(bench["features"]), bench.get("core_features")
    left_out = ", ".join(f for f in SELF_PROMPTING if f in bench["features"])
    columns = [
        ("bare", "engine: greedy + N samples"),
        ("naive", "transformers `generate`: greedy + N samples"),
        *([("workbench_core", f"workbench, {len(core)} features")] if core else []),
        ("workbench", f"workbench, all {n_all} features"),
    ]
    columns = [(way, label) for way, label in columns if way in bench]
    lines = [
        "## The whole collection vs the bare generation of the greedy answer + N samples",
        "",
        "*Engine*: the workbench generator's own greedy answer and N samples, batched over questions, the N samples "
        "sharing one prefill. *transformers `generate`*: what the peer libraries pay for the same answers — one "
        "question at a time, `model.generate` greedy, then `model.generate(do_sample=True, "
        "num_return_sequences=N)` (the prompt encoded once per sample, finished samples kept in the batch until the "
        "last one ends); same model, prompts, temperature, length cap and stop strings."
        + (
            f" *Workbench, {len(core)} features*: all but {left_out} (the features that prompt the model themselves)."
            if core
            else ""
        ),
        "",
        "| cost (all questions) | " + " | ".join(label for _, label in columns) + " |",
        "|---|" + "---:|" * len(columns),
        "| LM token-forwards | " + " | ".join(f"{bench[way]['token_forwards']:.0f}" for way, _ in columns) + " |",
        "| token-forwards saved by prefix reuse | "
        + " | ".join(f"{bench[way].get('prefix_reused_tokens', 0):.0f}" for way, _ in columns)
        + " |",
        "| LM calls | " + " | ".join(f"{bench[way]['lm_calls']:.0f}" for way, _ in columns) + " |",
        "| wall time (s), median (min–max) | " + " | ".join(_seconds(bench[way]) for way, _ in columns) + " |",
        "",
        "| ratio | wall time | token-forwards | target (wall time) |",
        "|---|---:|---:|---|",
    ]
    labels = {
        "workbench_over_bare": f"all {n_all} features / engine bare",
        "workbench_core_over_bare": f"{len(core or [])} features (no self-prompting) / engine bare",
        "workbench_over_naive": f"all {n_all} features / transformers `generate`",
    }
    for key, label in labels.items():
        if key not in ratios:
            continue
        value, target = ratios[key], TARGETS[key]
        lines.append(
            f"| {label} | {fmt(value['seconds'], 2, suffix='x')} | {fmt(value['token_forwards'], 2, suffix='x')} "
            f"| ≤ {target:g}x {_verdict(value['seconds'], lambda v, t=target: v <= t)} |"
        )
    naive = bench["naive"]["seconds"] / bench["bare"]["seconds"] if bench["bare"]["seconds"] else None
    peers = ", ".join(f"{who} {ratio:g}x" for who, ratio in PEER_CONTEXT)
    lines += [
        "",
        f"Here transformers `generate` takes {fmt(naive, 2, suffix='x')} the engine's time for the same greedy answers "
        f"and samples. For context, not measured in this run: an earlier session of this project ran the peer "
        f"libraries on SmolLM2 (N = 10 samples, 32 new tokens, 2 threads) and timed their feature collection "
        f"against this same naive generation: {peers}.",
        "",
        "Token-forwards count the positions the model computed, prompt tokens too (a forward pass processes those in "
        "parallel, so wall time is the better measure of cost on a CPU), less the prompt prefixes the engine encoded "
        "once for several rows (the row *saved by prefix reuse*). The features that need more than the greedy answer and the samples pay for "
        "their own model calls (Self-Detection: paraphrases and their answers; P(True) and Verbalized Confidence: a "
        "self-check prompt). The tables below show what each feature costs alone.",
    ]
    return lines


def report_lines(bench: dict[str, Any], name: str, command: str = "") -> list[str]:
    """The Markdown report: settings, the library-vs-workbench table, the bare-generation comparison (with
    :func:`bare_lines`), and the per-feature costs; every wall time a median, with its spread where repeated."""
    n = bench["questions"]
    ratios = bench["ratios"]
    work = bench["workbench"]
    lib, per = bench["library_total"], bench["per_feature_total"]

    def cell(value: float, key: str) -> str:
        return f"{value:.1f}" if key == "seconds" else f"{value:.0f}"

    s = bench["settings"]
    repeats, per_repeats = s.get("repeats", 1), s.get("per_feature_repeats", 1)
    lines = [
        f"# {name} report",
        "",
        f"Regenerate with `{command or f'workbench run {name}'}`. Generator `{bench['generator']}`, NLI judge "
        f"`{bench['nli_judge']}`, **{bench['threads']} torch thread(s)**, {n} `{s['split']}` questions, "
        f"N = {s['samples']} samples at T = {s['temperature']}, answers ≤ {s['max_new_tokens']} tokens, "
        f"P = {s['paraphrases']} for Self-Detection, no generation or embedding cache. Every way ran once untimed "
        f"first (warm-up: every code path it uses); the bare generations and the workbench are then timed "
        f"{repeats} time(s) in rotated order, each feature alone {per_repeats} time(s) (the two per-feature ways "
        "alternating which goes first); wall times are medians. Compare the ratios, not the absolute times (these "
        "machines are shared and noisy).",
        "",
        f"## All {len(bench['features'])} features: the workbench vs one feature at a time",
        "",
        "*Per-feature library*: one question and one feature at a time, each feature generating its own answers, "
        "samples and NLI matrix, N samples re-encoding the prompt (as HF `generate(num_return_sequences=N)` does). "
        "*Per feature, workbench engine*: one feature at a time but batched over questions with one shared prefill "
        "per prompt — what sharing the stats across features alone saves.",
        "",
        f"| cost (all questions) | workbench | per-feature library | ratio (target ≥ {LIBRARY_TARGET:g}x) "
        "| per feature, workbench engine | ratio |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for key, label in (
        ("token_forwards", "LM token-forwards"),
        ("lm_calls", "LM calls"),
        ("nli_pairs", "NLI pairs"),
        ("embed_texts", "embedded texts"),
        ("seconds", "wall time (s)"),
    ):
        lib_ratio = ratios["library_over_workbench"][key]
        per_ratio = ratios["per_feature_over_workbench"][key]
        target = (
            f" {_verdict(lib_ratio, lambda v: v >= LIBRARY_TARGET)}"
            if key in ("token_forwards", "nli_pairs", "seconds")
            else ""
        )
        work_cell = _seconds(work) if key == "seconds" else cell(work[key], key)
        lines.append(
            f"| {label} | {work_cell} | {cell(lib[key], key)} | {fmt(lib_ratio, 2)}x{target} "
            f"| {cell(per[key], key)} | {fmt(per_ratio, 2)}x |"
        )
    lines += [
        "",
        *bare_lines(bench),
        "",
        "## Each feature alone",
        "",
        "![cost per feature](per_feature.png)",
        "",
        "| feature | library: token-forwards | library: s | engine: token-forwards | engine: LM calls "
        "| engine: NLI pairs | engine: embedded texts | engine: s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for feature, row in bench["per_feature"].items():
        lrow = bench["library"][feature]
        lines.append(
            f"| {feature} | {lrow['token_forwards']:.0f} | {_seconds(lrow)} | {row['token_forwards']:.0f} "
            f"| {row['lm_calls']:.0f} | {row['nli_pairs']:.0f} | {row['embed_texts']:.0f} | {_seconds(row)} |"
        )
    return [*lines, ""]


def write_feature_cost_report(bench: dict[str, Any], out_dir: Path, *, name: str, command: str = "") -> Path:
    """Write ``report.md`` (:func:`report_lines`; ``command`` regenerates it, default ``workbench run <name>``) and
    ``per_feature.png`` (each feature's token-forwards alone, library and workbench engine, relative to the
    workbench collecting all of them) for the benchmark record ``bench`` into ``out_dir``. Returns the ``report.md``
    path."""
    from workbench.plots import grouped_bars

    work = bench["workbench"]["token_forwards"]
    grouped_bars(
        out_dir / "per_feature.png",
        list(bench["per_feature"]),
        {
            "library": [r["token_forwards"] / work for r in bench["library"].values()],
            "workbench engine": [r["token_forwards"] / work for r in bench["per_feature"].values()],
        },
        title="LM token-forwards of each feature alone, relative to the workbench collecting all of them",
        ylabel="relative token-forwards",
        ylim=None,
        rotate=45,
    )
    (out_dir / "report.md").write_text("\n".join(report_lines(bench, name, command)), encoding="utf-8")
    return out_dir / "report.md"
