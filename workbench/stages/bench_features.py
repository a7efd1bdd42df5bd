"""Stages ``bench_features`` and ``report_bench_features``: the cost of collecting the 18 D²-RAG features.

The same questions, generator and NLI judge, four ways (no generation or embedding cache anywhere, so nothing is
reused by accident; costs from one :class:`~workbench.backends.cost.CostCounter`):

* **workbench** — one :func:`~workbench.uncertainty.calculators.compute_stats` call for all features: every stat
  computed once per question, batched over questions, one NLI matrix shared by every graph feature;
* **per-feature library** — the way a per-feature library (TruthTorchLM-style) works: one question and one feature
  at a time, each feature generating its own greedy answer, samples and NLI matrix, and N samples re-encoding the
  prompt N times (what HF ``generate(num_return_sequences=N)`` does);
* **per feature, workbench engine** — one ``compute_stats`` call per feature, batched over questions with shared
  prefill: isolates what sharing stats across features saves;
* **bare generation** — the greedy answer and the N samples only (the floor any sampling-based method pays).

Token-forwards = prefill + decoded + teacher-forced (scored) tokens. Targets (issue 4): per-feature library /
workbench ≥ 5x in token-forwards, NLI pairs and wall time; workbench / bare ≤ 1.3x. ``lars`` is costed as the greedy
answer with its log-probs (its fitted scorer is a dot product; collect fits it on labelled data).
"""

from __future__ import annotations

import json
import time
from typing import Any

from workbench.core.atomic import atomic_directory, atomic_write_json
from workbench.core.formatting import fmt
from workbench.stages.context import StageContext


def _forwards(cost: Any) -> int:
    return int(cost.prefill_tokens + cost.decoded_tokens + cost.scored_tokens)


def _measure(counter: Any, fn) -> dict[str, float]:
    before, began = counter.snapshot(), time.perf_counter()
    fn()
    seconds, cost = time.perf_counter() - began, counter.since(before)
    return {
        "seconds": seconds,
        "token_forwards": _forwards(cost),
        "lm_calls": cost.lm_calls,
        "nli_pairs": cost.nli_pairs,
        "embed_texts": cost.embed_texts,
    }


def _stats_for(features: list[str]) -> set[str]:
    from workbench.uncertainty.calculators import UNAVAILABLE_STATS
    from workbench.uncertainty.features import required_stats

    stats = required_stats(features)
    if stats & UNAVAILABLE_STATS:  # lars: its scorer reads the greedy answer's log-probs
        stats = (stats - UNAVAILABLE_STATS) | {"greedy_logprobs"}
    return stats


class _ReencodingGenerator:
    """A generator proxy whose N samples re-encode the prompt N times (no shared prefill), as HF generate does."""

    def __init__(self, generator: Any) -> None:
        self._generator = generator

    def __getattr__(self, name: str) -> Any:
        return getattr(self._generator, name)

    def generate(self, prompts: Any, **kwargs: Any) -> Any:
        return self._generator.generate(prompts, share_prefill=False, **kwargs)


def run(ctx: StageContext) -> dict[str, Any]:
    """Measure the four ways on ``bench_features.questions`` questions; write ``bench.json``."""
    import torch

    from workbench.assets import resolve_generator
    from workbench.backends.cost import CostCounter
    from workbench.backends.factory import build_embedder, build_generator
    from workbench.backends.nli import AnswerEquivalenceJudge
    from workbench.core.logs import track
    from workbench.data.dataset_store import load_saved_dataset_dict
    from workbench.stages.nli_eval import build_judge
    from workbench.uncertainty.calculators import ANSWER_SYSTEM, StatSettings, compute_stats
    from workbench.uncertainty.features import get_features

    section, gen_cfg = ctx.config.bench_features, ctx.config.generator
    features = list(section.features)
    get_features(features)  # unknown names → ConfigError
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    rows = list(qa[section.split].select(range(min(section.questions, len(qa[section.split])))))
    counter = CostCounter()
    generator = build_generator(  # no generation cache: every way pays for what it generates
        resolve_generator(gen_cfg.model),
        device=gen_cfg.device,
        dtype=gen_cfg.dtype,
        max_context=gen_cfg.max_context,
        batch_size=gen_cfg.batch_size,
        cache=False,
        counter=counter,
        seed=ctx.config.seed,
        device_key="generator.device",
    )
    embedder = build_embedder(
        ctx.config.embedder.model, batch_size=ctx.config.embedder.batch_size, cache=False, counter=counter
    )
    if ctx.config.nli.kind == "answer_equivalence":
        judge = AnswerEquivalenceJudge(embedder, counter=counter)
    else:
        judge = build_judge(ctx.config.nli.kind, ctx.resources, ctx.config.nli.model)
        judge.counter = counter
    settings = StatSettings(
        samples=section.samples,
        temperature=section.temperature,
        max_new_tokens=section.max_new_tokens,
        paraphrases=section.paraphrases,
    )

    def stats(names: list[str], batch: list[dict] | None = None, engine: Any = generator) -> None:
        compute_stats(
            rows if batch is None else batch,
            _stats_for(names),
            generator=engine,
            judge=judge,
            embedder=embedder,
            settings=settings,
        )

    def library(name: str) -> None:
        for row in rows:
            stats([name], [row], _ReencodingGenerator(generator))

    def per_feature(name: str) -> None:
        stats([name])

    def bare() -> None:
        prompts = [
            generator.build_prompt(
                r["question"], None, max_new_tokens=section.max_new_tokens, system=ANSWER_SYSTEM
            ).text
            for r in rows
        ]
        common = {"max_new_tokens": section.max_new_tokens, "stop": settings.stop}
        generator.generate(prompts, temperature=0.0, **common)
        generator.generate(prompts, temperature=section.temperature, n=section.samples, **common)

    stats(["confidence"])  # warm-up: first-call allocations are not charged to either way
    results: dict[str, Any] = {"bare": _measure(counter, bare), "workbench": _measure(counter, lambda: stats(features))}
    keys = ("seconds", "token_forwards", "lm_calls", "nli_pairs", "embed_texts")
    for way, fn in (("library", library), ("per_feature", per_feature)):
        costs = {}
        for name in track(features, f"bench ({way.replace('_', ' ')})", total=len(features)):
            costs[name] = _measure(counter, lambda fn=fn, name=name: fn(name))
        results[way] = costs
        results[f"{way}_total"] = {k: sum(v[k] for v in costs.values()) for k in keys}
    work, floor = results["workbench"], results["bare"]
    results["ratios"] = {
        f"{way}_over_workbench": {k: results[f"{way}_total"][k] / work[k] if work[k] else None for k in keys}
        for way in ("library", "per_feature")
    }
    results["ratios"]["workbench_over_bare"] = {
        k: work[k] / floor[k] if floor[k] else None for k in ("seconds", "token_forwards")
    }
    bench = {
        "generator": gen_cfg.model,
        "nli_judge": ctx.config.nli.kind,
        "threads": torch.get_num_threads(),
        "questions": len(rows),
        "features": features,
        "settings": {
            "samples": section.samples,
            "temperature": section.temperature,
            "max_new_tokens": section.max_new_tokens,
            "paraphrases": section.paraphrases,
            "split": section.split,
        },
        **results,
    }
    atomic_write_json(ctx.out_dir / "bench.json", bench)
    ratios = results["ratios"]["library_over_workbench"]
    return {
        "forwards_ratio": _rounded(ratios["token_forwards"]),
        "nli_ratio": _rounded(ratios["nli_pairs"]),  # None when no selected feature uses the NLI judge
        "time_ratio": _rounded(ratios["seconds"]),
        "over_bare_seconds": _rounded(results["ratios"]["workbench_over_bare"]["seconds"]),
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def report_lines(bench: dict[str, Any], name: str) -> list[str]:
    """The Markdown report: settings, the two ratio tables with their targets, and the per-feature costs."""
    n = bench["questions"]
    ratios = bench["ratios"]
    over = ratios["workbench_over_bare"]
    work, bare = bench["workbench"], bench["bare"]
    lib, per = bench["library_total"], bench["per_feature_total"]

    def verdict(value: float | None, ok) -> str:
        return "n/a" if value is None else ("met" if ok(value) else "**not met**")

    def cell(value: float, key: str) -> str:
        return f"{value:.1f}" if key == "seconds" else f"{value:.0f}"

    s = bench["settings"]
    lines = [
        f"# {name} report",
        "",
        f"Regenerate with `workbench run {name}`. Generator `{bench['generator']}`, NLI judge "
        f"`{bench['nli_judge']}`, **{bench['threads']} torch thread(s)**, {n} `{s['split']}` questions, "
        f"N = {s['samples']} samples at T = {s['temperature']}, answers ≤ {s['max_new_tokens']} tokens, "
        f"P = {s['paraphrases']} for Self-Detection, no generation or embedding cache. One run; compare the ratios, "
        "not the absolute times (these machines are shared and noisy).",
        "",
        f"## All {len(bench['features'])} features: the workbench vs one feature at a time",
        "",
        "*Per-feature library*: one question and one feature at a time, each feature generating its own answers, "
        "samples and NLI matrix, N samples re-encoding the prompt (as HF `generate(num_return_sequences=N)` does). "
        "*Per feature, workbench engine*: one feature at a time but batched over questions with one shared prefill "
        "per prompt — what sharing the stats across features alone saves.",
        "",
        "| cost (all questions) | workbench | per-feature library | ratio (target ≥ 5x) "
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
            f" {verdict(lib_ratio, lambda v: v >= 5.0)}" if key in ("token_forwards", "nli_pairs", "seconds") else ""
        )
        lines.append(
            f"| {label} | {cell(work[key], key)} | {cell(lib[key], key)} | {fmt(lib_ratio, 2)}x{target} "
            f"| {cell(per[key], key)} | {fmt(per_ratio, 2)}x |"
        )
    lines += [
        "",
        "## The whole collection vs the bare generation of the greedy answer + N samples",
        "",
        "| cost (all questions) | bare generation | workbench, all features | ratio | target ≤ 1.3x |",
        "|---|---:|---:|---:|---|",
        f"| LM token-forwards | {bare['token_forwards']:.0f} | {work['token_forwards']:.0f} "
        f"| {fmt(over['token_forwards'], 2)}x | {verdict(over['token_forwards'], lambda v: v <= 1.3)} |",
        f"| wall time (s) | {bare['seconds']:.1f} | {work['seconds']:.1f} | {fmt(over['seconds'], 2)}x "
        f"| {verdict(over['seconds'], lambda v: v <= 1.3)} |",
        "",
        "Token-forwards count prompt tokens too, which a forward pass processes in parallel, so wall time is the "
        "better measure of cost on a CPU. The features that need more than the greedy answer and the samples pay for "
        "their own model calls: Self-Detection (P − 1 paraphrases and their answers), P(True) (one forward over a "
        "prompt listing the samples), Verbalized Confidence (one short generation). The tables below show what each "
        "feature costs alone.",
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
            f"| {feature} | {lrow['token_forwards']} | {lrow['seconds']:.1f} | {row['token_forwards']} "
            f"| {row['lm_calls']} | {row['nli_pairs']} | {row['embed_texts']} | {row['seconds']:.1f} |"
        )
    return [*lines, ""]


def report(ctx: StageContext) -> dict[str, Any]:
    """Write ``report.md`` and ``per_feature.png`` to the report directory."""
    from workbench.plots import grouped_bars

    bench = json.loads((ctx.inputs["bench_features"] / "bench.json").read_text())
    report_dir = ctx.config.resolved_report_dir
    work = bench["workbench"]["token_forwards"]
    with atomic_directory(report_dir) as tmp:
        grouped_bars(
            tmp / "per_feature.png",
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
        (tmp / "report.md").write_text("\n".join(report_lines(bench, ctx.config.name)), encoding="utf-8")
    return {"report": str(report_dir / "report.md")}
