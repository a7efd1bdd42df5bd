"""Stages ``bench_features`` and ``report_bench_features``: the cost of collecting the 18 D²-RAG features.

The same questions, generator and NLI judge, three ways (no generation cache anywhere, so nothing is reused by
accident; costs from the run's :class:`~workbench.backends.cost.CostCounter`):

* **workbench** — one :func:`~workbench.uncertainty.calculators.compute_stats` call for all features: every stat
  computed once per question, batched over questions, one NLI matrix shared by every graph feature;
* **per feature** — one ``compute_stats`` call per feature with only that feature's stats, the way a per-feature
  library works: each feature generates its own greedy answer, samples and NLI matrix;
* **bare generation** — the greedy answer and the N samples only (the floor any sampling-based method pays).

Token-forwards = prefill + decoded + teacher-forced (scored) tokens. Targets (issue 4): per feature / workbench
≥ 5x in token-forwards, NLI pairs and wall time; workbench / bare ≤ 1.3x. ``lars`` is costed as the greedy answer
with its log-probs (its fitted scorer is a dot product; collect fits it on labelled data).
"""

from __future__ import annotations

import json
import time
from typing import Any

from workbench.core.atomic import atomic_directory, atomic_write_json
from workbench.stages.context import StageContext

D2RAG_FEATURES: tuple[str, ...] = (
    "entropy",
    "semantic_entropy",
    "mars",
    "lars",
    "sent_sar",
    "token_sar",
    "confidence",
    "inside",
    "attention_score",
    "eccentricity_uncertainty",
    "eccentricity_confidence",
    "matrix_degree_confidence",
    "matrix_degree_uncertainty",
    "sum_eigen_uncertainty",
    "ptrue",
    "verbalized_confidence",
    "self_detection",
    "directional_entailment_graph",
)
"""The 18 uncertainty features of D²-RAG §3, by registry name."""


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


def run(ctx: StageContext) -> dict[str, Any]:
    """Measure the three ways on ``bench_features.questions`` questions; write ``bench.json``."""
    import torch

    from workbench.assets import resolve_generator
    from workbench.backends.cost import CostCounter
    from workbench.backends.generator import Generator
    from workbench.core.logs import track
    from workbench.data.wikiqa import load_saved_dataset_dict
    from workbench.stages.nli_eval import build_judge
    from workbench.uncertainty.calculators import ANSWER_SYSTEM, StatSettings, compute_stats
    from workbench.uncertainty.features import get_features

    section, gen_cfg = ctx.config.bench_features, ctx.config.generator
    features = list(section.features)
    get_features(features)  # unknown names → ConfigError
    qa = load_saved_dataset_dict(ctx.inputs["build_data"] / "qa")
    rows = list(qa[section.split].select(range(min(section.questions, len(qa[section.split])))))
    counter = CostCounter()
    generator = Generator(  # no generation cache: every way pays for what it generates
        resolve_generator(gen_cfg.model),
        device=gen_cfg.device,
        dtype=gen_cfg.dtype,
        max_context=gen_cfg.max_context,
        batch_size=gen_cfg.batch_size,
        counter=counter,
        seed=ctx.config.seed,
    )
    judge = build_judge(ctx.config.nli.kind, ctx.resources, ctx.config.nli.model)
    judge.counter = counter
    embedder = ctx.resources.embedder()
    embedder.counter = counter
    settings = StatSettings(
        samples=section.samples,
        temperature=section.temperature,
        max_new_tokens=section.max_new_tokens,
        paraphrases=section.paraphrases,
    )

    def stats(names: list[str]) -> None:
        compute_stats(rows, _stats_for(names), generator=generator, judge=judge, embedder=embedder, settings=settings)

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
    per_feature = {}
    for name in track(features, "bench (one feature at a time)", total=len(features)):
        per_feature[name] = _measure(counter, lambda name=name: stats([name]))
    results["per_feature"] = per_feature
    keys = ("seconds", "token_forwards", "lm_calls", "nli_pairs", "embed_texts")
    results["per_feature_total"] = {k: sum(v[k] for v in per_feature.values()) for k in keys}
    work, total, floor = results["workbench"], results["per_feature_total"], results["bare"]
    results["ratios"] = {
        "per_feature_over_workbench": {k: total[k] / work[k] if work[k] else None for k in keys},
        "workbench_over_bare": {k: work[k] / floor[k] if floor[k] else None for k in ("seconds", "token_forwards")},
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
    ratios = results["ratios"]
    return {
        "forwards_ratio": round(ratios["per_feature_over_workbench"]["token_forwards"], 2),
        "nli_ratio": ratios["per_feature_over_workbench"]["nli_pairs"],
        "time_ratio": round(ratios["per_feature_over_workbench"]["seconds"], 2),
        "over_bare_forwards": round(ratios["workbench_over_bare"]["token_forwards"], 2),
    }


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def report_lines(bench: dict[str, Any], name: str) -> list[str]:
    """The Markdown report: settings, the two ratio tables with their targets, and the per-feature costs."""
    n = bench["questions"]
    ratio = bench["ratios"]["per_feature_over_workbench"]
    over = bench["ratios"]["workbench_over_bare"]
    work, total, bare = bench["workbench"], bench["per_feature_total"], bench["bare"]

    def verdict(value: float | None, ok) -> str:
        return "n/a" if value is None else ("met" if ok(value) else "**not met**")

    s = bench["settings"]
    lines = [
        f"# {name} report",
        "",
        f"Regenerate with `workbench run {name}`. Generator `{bench['generator']}`, NLI judge "
        f"`{bench['nli_judge']}`, **{bench['threads']} torch thread(s)**, {n} `{s['split']}` questions, "
        f"N = {s['samples']} samples at T = {s['temperature']}, answers ≤ {s['max_new_tokens']} tokens, "
        f"P = {s['paraphrases']} for Self-Detection, no generation cache. One run; compare the ratios, not the "
        "absolute times (these machines are shared and noisy).",
        "",
        f"## All {len(bench['features'])} features: the workbench vs one feature at a time",
        "",
        "| cost (all questions) | workbench (shared stats) | one feature at a time (sum) | ratio | target ≥ 5x |",
        "|---|---:|---:|---:|---|",
    ]
    for key, label in (
        ("token_forwards", "LM token-forwards"),
        ("lm_calls", "LM calls"),
        ("nli_pairs", "NLI pairs"),
        ("embed_texts", "embedded texts"),
        ("seconds", "wall time (s)"),
    ):
        target = verdict(ratio[key], lambda v: v >= 5.0) if key in ("token_forwards", "nli_pairs", "seconds") else ""
        lines.append(
            f"| {label} | {work[key]:.0f} | {total[key]:.0f} | {_fmt(ratio[key])}x | {target} |"
            if key != "seconds"
            else f"| {label} | {work[key]:.1f} | {total[key]:.1f} | {_fmt(ratio[key])}x | {target} |"
        )
    lines += [
        "",
        "## The whole collection vs the bare generation of the greedy answer + N samples",
        "",
        "| cost (all questions) | bare generation | workbench, all features | ratio | target ≤ 1.3x |",
        "|---|---:|---:|---:|---|",
        f"| LM token-forwards | {bare['token_forwards']:.0f} | {work['token_forwards']:.0f} "
        f"| {_fmt(over['token_forwards'])}x | {verdict(over['token_forwards'], lambda v: v <= 1.3)} |",
        f"| wall time (s) | {bare['seconds']:.1f} | {work['seconds']:.1f} | {_fmt(over['seconds'])}x "
        f"| {verdict(over['seconds'], lambda v: v <= 1.3)} |",
        "",
        "The features that need more than the greedy answer and the samples pay for their own generations: "
        "Self-Detection (P − 1 paraphrases and their answers), P(True) (one scoring forward), Verbalized Confidence "
        "(one short generation), the EOS scoring pass. The per-feature table below shows what each costs alone.",
        "",
        "## Each feature alone",
        "",
        "![cost per feature](per_feature.png)",
        "",
        "| feature | token-forwards | LM calls | NLI pairs | embedded texts | wall time (s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for feature, row in bench["per_feature"].items():
        lines.append(
            f"| {feature} | {row['token_forwards']} | {row['lm_calls']} | {row['nli_pairs']} | {row['embed_texts']} "
            f"| {row['seconds']:.1f} |"
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
            {"alone / workbench (all 18)": [r["token_forwards"] / work for r in bench["per_feature"].values()]},
            title="LM token-forwards of each feature alone, relative to the workbench's whole collection",
            ylabel="relative token-forwards",
            ylim=None,
            rotate=45,
        )
        (tmp / "report.md").write_text("\n".join(report_lines(bench, ctx.config.name)), encoding="utf-8")
    return {"report": str(report_dir / "report.md")}
